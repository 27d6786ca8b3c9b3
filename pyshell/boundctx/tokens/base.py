"""The token-counter interface every counter implements (llama.cpp, byte estimate, ...)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Message", "TokenCounter", "fewest_tokens", "message_text"]

#: A chat message as the OpenAI-compatible APIs spell it: ``{"role": ..., "content": ...}``
#: where content is a string or a list of parts (``{"type": "text", "text": ...}``).
Message = Mapping[str, Any]


def message_text(message: Message) -> str:
    """All the text a message carries to the model: content (string or text parts),
    tool calls and tool-call ids, as they would be rendered."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        parts.append(str(fn.get("name", "")))
        parts.append(str(fn.get("arguments", "")))
    for key in ("name", "tool_call_id"):
        if isinstance(message.get(key), str):
            parts.append(message[key])
    return "".join(parts)


_WORDS = re.compile(r"[^ \t\n\r\f\v]+")


def fewest_tokens(messages: Sequence[Message]) -> int:
    """A lower bound of the tokens ``messages`` take on any model whose tokenizer never
    makes one token of two words: the words (runs of characters that are not
    whitespace) of the text they carry.

    Why it holds: byte-level BPE tokenizers (GPT-2, cl100k/o200k, Llama 3, Qwen,
    SmolLM2) first split text into pieces of at most one word, with at most one space
    before it, and merge only within a piece; SentencePiece splits at whitespace by
    default (``split_by_whitespace``). So each word is one token at least, and the
    template's own tokens only add to it. Parts of a message are joined without a space,
    which can only join two words into one: fewer, never more. Words are split at
    ASCII whitespace only: a tokenizer may not split at the other characters Python
    calls whitespace (U+001C to U+001F are not Unicode White_Space), and splitting at
    fewer places only lowers the bound.
    """
    return sum(len(_WORDS.findall(message_text(m))) for m in messages)


class TokenCounter(ABC):
    r"""Counts tokens the way one model sees them.

    Attributes
    ----------
    exact : bool
        True when counts are what the model will process; False for an estimate, which
        must then never count fewer tokens than the model would.
    newline_sync : bool
        True when text counts split exactly at every position right after ``\n`` whose
        next character is not whitespace: ``count_text(t[a:b]) == count_text(t[a:i]) +
        count_text(t[i:b])``. The section splitter then re-counts only the edges of each
        section. Declare it only for a tokenizer whose pre-tokenizer is known to
        guarantee it (see ``TiktokenCounter``); the default is the full count.
    sync_after_text : bool
        With ``newline_sync``: the claim holds only where the ``\n`` itself follows a
        character that is not whitespace (GPT-2-style pre-tokenizers, whose
        ``\s+(?!\S)`` joins a run of whitespace ending a text into one piece; see
        ``LlamaVocab``).
    sync_at_spaces : bool
        With ``newline_sync``: counts also add up before a single space between two
        characters that are not whitespace (the same pre-tokenizers: a space only ever
        leads the piece after it).
    """

    exact: bool = False
    newline_sync: bool = False
    sync_after_text: bool = False
    sync_at_spaces: bool = False

    @abstractmethod
    def count_text(self, text: str) -> int:
        """Tokens of ``text`` on its own (no template, no special tokens)."""

    @abstractmethod
    def count_prompt(self, messages: Sequence[Message], *,
                     tools: Sequence[Mapping[str, Any]] | None = None,
                     add_generation_prompt: bool = True) -> int:
        """Tokens of the whole rendered prompt for ``messages`` (and ``tools``)."""

    @abstractmethod
    def piece_bytes(self, text: str) -> np.ndarray:
        """UTF-8 byte length of each token of ``text``, in order (int64); they add up
        to the text's UTF-8 length."""
