"""Local models through llama-cpp-python: one process-wide lock, exact prompt tokens.

The prompt is never a string handed to llama-cpp-python to tokenize: it is the token
list :meth:`LlamaCounter.prompt_tokens` builds (decision 0007), so the count checked
against the window is the count evaluated, and text such as ``<|im_end|>`` inside a
message stays text. Every generation on any local model holds :data:`INFERENCE_LOCK`
from its first token to its last, so local calls never overlap, whichever thread makes
them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from boundctx.errors import GenerationTimeout
from boundctx.providers.base import ChatRequest, Chunk, Finish, Provider, TextChunk

__all__ = ["INFERENCE_LOCK", "LlamaCppProvider"]

#: Held by every generation on a local model in this process.
INFERENCE_LOCK = threading.Lock()


class LlamaCppProvider(Provider):
    """A GGUF model run in this process.

    Parameters
    ----------
    model_path : str, optional
        A GGUF file; default: the embedded SmolLM2-135M-Instruct.
    n_ctx : int
        The context window to open the model with (llama-cpp-python's own default, 512,
        is never used).
    n_threads : int, optional
        CPU threads for inference (llama.cpp's default when omitted).
    seed : int
        Sampling seed.
    chat_template : str, optional
        A Jinja chat template instead of the model's own.

    Notes
    -----
    The model is loaded on the first call. Prompt evaluation cannot be interrupted, so a
    time limit or a cancellation takes effect at the next generated token. llama.cpp
    reuses the longest common token prefix with the previous prompt, so callers that keep
    a stable prefix (system prompt, instructions) save its evaluation.
    """

    name = "local"
    #: Generations take turns on :data:`INFERENCE_LOCK`: callers that run tasks in
    #: parallel can wait for their turn first and count the wait against their clock.
    serialises = True

    def __init__(self, model_path: str | None = None, *, n_ctx: int = 8192, n_threads: int | None = None,
                 seed: int = 1234, chat_template: str | None = None) -> None:
        from boundctx.tokens.llama import LlamaCounter

        if n_ctx < 16:
            raise ValueError(f"n_ctx must be >= 16, got {n_ctx}")
        self.counter = LlamaCounter(model_path, chat_template=chat_template)
        self.model_path = self.counter.vocab.model_path
        # Tools reach the model only through its chat template; a template that never
        # mentions them (SmolLM2's) would drop them silently.
        template = self.counter.template
        self.supports_tools = template is not None and "tools" in template.source
        self.context_window = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self._llm = None
        self._load_lock = threading.Lock()

    def _model(self):
        with self._load_lock:
            if self._llm is None:
                import llama_cpp

                self._llm = llama_cpp.Llama(model_path=self.model_path, n_ctx=self.context_window,
                                            n_threads=self.n_threads, seed=self.seed, verbose=False)
            return self._llm

    def close(self) -> None:
        """Free the model (it is loaded again on the next call)."""
        with self._load_lock, INFERENCE_LOCK:
            if self._llm is not None:
                self._llm.close()
                self._llm = None

    def _stream(self, request: ChatRequest, *, cancel: Any, timeout_s: float | None) -> Iterator[Chunk]:
        tokens = self.counter.prompt_tokens(request.messages, tools=request.tools)
        self._check_fits(len(tokens), request.max_tokens)
        llm = self._model()
        grammar = None
        if request.schema is not None:
            import llama_cpp

            grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(request.schema), verbose=False)
        with INFERENCE_LOCK:
            started = time.monotonic()
            stream = llm.create_completion(prompt=tokens, max_tokens=request.max_tokens,
                                           temperature=request.temperature, stop=request.stop or [],
                                           grammar=grammar, stream=True)
            # llama-cpp-python streams one piece per generated token (it holds back a
            # token that ends inside a UTF-8 character and sends it with the next).
            generated = 0
            reason = "stop"
            try:
                for part in stream:
                    choice = part["choices"][0]
                    if choice.get("text"):
                        generated += 1
                        yield TextChunk(choice["text"])
                    if choice.get("finish_reason"):
                        reason = choice["finish_reason"]
                    if cancel is not None and cancel.is_set():
                        reason = "cancelled"
                        break
                    if timeout_s is not None and time.monotonic() - started > timeout_s:
                        raise GenerationTimeout(
                            f"the local generation ran past its {timeout_s:g} s limit after "
                            f"{generated} tokens; it was stopped")
            finally:
                stream.close()  # stops llama.cpp decoding now, not at garbage collection
        yield Finish(reason, len(tokens), generated)
