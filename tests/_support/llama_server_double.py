"""A stand-in for llama.cpp's llama-server on loopback, backed by the real tokenizer.

It serves ``GET /props``, ``POST /apply-template`` and ``POST /tokenize`` with the
response shapes llama-server documents, computed with the embedded GGUF's own
tokenizer (llama-cpp-python, vocabulary only) and its own chat template rendered
with Jinja2. Switches reproduce older builds: endpoints that answer 404, a
``/tokenize`` that ignores ``parse_special``, or pieces that do not match the text.
Every request body, and its ``Authorization`` header, is recorded so tests can check
what the client sent.

With ``keep_tokens`` it also answers ``POST /v1/chat/completions`` as Ollama does with a
prompt longer than its ``num_ctx``: it keeps the prompt's last ``keep_tokens`` tokens,
answers 200 all the same, and reports the tokens it kept as ``usage.prompt_tokens``.
"""

from __future__ import annotations

import ctypes
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jinja2
import jinja2.sandbox
import llama_cpp

from boundctx.tokens.llama import LlamaVocab


class LlamaServerDouble:
    """Serve the embedded model's tokenizer the way llama-server does.

    Parameters
    ----------
    n_ctx : int
        The server's whole context (``-c``); each slot gets ``n_ctx // slots``.
    slots : int
        Parallel slots (``-np``).
    missing : set of str
        Paths that answer 404, as on a build without them.
    ignore_parse_special : bool
        Tokenize special-token text as special tokens whatever the request says
        (builds before the ``parse_special`` option).
    corrupt_pieces : bool
        Return pieces unrelated to the text (a broken proxy).
    keep_tokens : int, optional
        Serve chat completions, cutting a longer prompt to its last ``keep_tokens``
        tokens (see the module's docstring); ``cut`` counts the prompts it cut.
    """

    def __init__(self, *, n_ctx: int = 8192, slots: int = 2, missing: set[str] = frozenset(),
                 ignore_parse_special: bool = False, corrupt_pieces: bool = False,
                 keep_tokens: int | None = None) -> None:
        self.vocab = LlamaVocab()
        self.llm = self.vocab._llm
        self.n_ctx, self.slots = n_ctx, slots
        self.missing = set(missing)
        self.ignore_parse_special = ignore_parse_special
        self.corrupt_pieces = corrupt_pieces
        self.keep_tokens = keep_tokens
        self.cut = 0
        self.requests: list[tuple[str, str, object]] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self.byte_list_pieces = 0  # pieces sent as byte lists (not valid UTF-8 alone)
        vocab = self.llm._model.vocab
        self._vocab_ptr = vocab
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self.bos_token = self.piece(llama_cpp.llama_vocab_bos(vocab)).decode("utf-8", "replace")
        self.eos_token = self.piece(llama_cpp.llama_vocab_eos(vocab)).decode("utf-8", "replace")
        self.chat_template = self.vocab.metadata["tokenizer.chat_template"]
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = env.from_string(self.chat_template)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- what llama-server computes -------------------------------------------------

    def piece(self, token: int) -> bytes:
        """A token's bytes with special tokens shown, as ``common_token_to_piece`` does."""
        buf = ctypes.create_string_buffer(128)
        n = llama_cpp.llama_token_to_piece(self._vocab_ptr, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab_ptr, token, buf, len(buf), 0, True)
        return buf.raw[:n]

    def render(self, messages, *, add_generation_prompt=True, tools=None) -> str:
        prompt = self._template.render(messages=messages, tools=tools,
                                       add_generation_prompt=add_generation_prompt,
                                       bos_token=self.bos_token, eos_token=self.eos_token)
        # llama.cpp drops a rendered leading BOS when the tokenizer will add one.
        if self.add_bos and self.bos_token and prompt.startswith(self.bos_token):
            prompt = prompt[len(self.bos_token):]
        return prompt

    def tokenize(self, content: str, *, add_special: bool, parse_special: bool) -> list[int]:
        if self.ignore_parse_special:
            parse_special = True
        return self.llm.tokenize(content.encode("utf-8"), add_bos=add_special, special=parse_special)

    # -- HTTP -----------------------------------------------------------------------

    def _answer(self, method: str, path: str, body: object) -> tuple[int, object]:
        self.requests.append((method, path, body))
        if path in self.missing:
            return 404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
        if (method, path) == ("GET", "/props"):
            return 200, {
                "default_generation_settings": {"n_ctx": self.n_ctx // self.slots, "params": {}},
                "total_slots": self.slots,
                "model_path": self.vocab.model_path,
                "modalities": {"vision": False, "audio": False},
                "chat_template": self.chat_template,
                "bos_token": self.bos_token,
                "eos_token": self.eos_token,
                "build_info": "b0-double",
            }
        if (method, path) == ("POST", "/apply-template"):
            prompt = self.render(body["messages"], tools=body.get("tools"),
                                 add_generation_prompt=body.get("add_generation_prompt", True))
            return 200, {"prompt": prompt}
        if (method, path) == ("POST", "/tokenize"):
            ids = self.tokenize(body["content"], add_special=body.get("add_special", False),
                                parse_special=body.get("parse_special", True))
            if not body.get("with_pieces", False):
                return 200, {"tokens": ids}
            if self.corrupt_pieces:
                return 200, {"tokens": [{"id": i, "piece": "?" * 40} for i in ids]}
            out = []
            for i in ids:
                raw = self.piece(i)
                try:
                    piece: object = raw.decode("utf-8")
                except UnicodeDecodeError:
                    piece = list(raw)
                    self.byte_list_pieces += 1
                out.append({"id": i, "piece": piece})
            return 200, {"tokens": out}
        if (method, path) == ("POST", "/v1/chat/completions") and self.keep_tokens is not None:
            prompt = self.render(body["messages"], tools=body.get("tools"))
            n = len(self.tokenize(prompt, add_special=True, parse_special=True))
            kept = min(n, self.keep_tokens)
            self.cut += kept < n
            return 200, {"id": "chatcmpl-double", "object": "chat.completion", "model": body.get("model", ""),
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "ok"}}],
                         "usage": {"prompt_tokens": kept, "completion_tokens": 1, "total_tokens": kept + 1}}
        if path in ("/props", "/apply-template", "/tokenize"):
            return 405, {"error": {"code": 405, "message": "Method Not Allowed"}}
        return 404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}

    def start(self) -> str:
        """Serve on a free loopback port in a thread; returns the base URL."""
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _serve(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                double.authorizations.append(self.headers.get("Authorization"))
                try:
                    body = json.loads(self.rfile.read(n)) if n else None
                    status, answer = double._answer(method, self.path, body)
                except Exception as exc:  # what llama-server does with a bad request
                    status, answer = 500, {"error": {"code": 500, "message": str(exc),
                                                     "type": "server_error"}}
                data = json.dumps(answer, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for the loop to notice (0.5 s by default).
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None
