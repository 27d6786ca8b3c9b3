"""Count a growing conversation each turn by counting only its new messages."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from boundctx.tokens.base import Message, TokenCounter

__all__ = ["PromptCountCache"]


class PromptCountCache:
    """Per-message token counts keyed by a hash of the message's content.

    Template tokenization is not additive at message boundaries, so the sum of cached
    counts is an estimate of the prompt; :meth:`fits` trusts it only with a margin and
    falls back to one exact count of the full render when the prompt is near the limit.

    Parameters
    ----------
    counter : TokenCounter
    max_entries : int
        Least recently used entries beyond this are dropped.
    """

    def __init__(self, counter: TokenCounter, *, max_entries: int = 65536) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.counter = counter
        self.max_entries = max_entries
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(message: Message) -> bytes:
        return hashlib.blake2b(msgspec.json.encode(dict(message)), digest_size=16).digest()

    def message_tokens(self, message: Message) -> int:
        """Tokens of one message rendered alone (template included), cached."""
        key = self._key(message)
        if key in self._counts:
            self.hits += 1
            self._counts.move_to_end(key)
            return self._counts[key]
        self.misses += 1
        n = self.counter.count_prompt([message], add_generation_prompt=False)
        self._counts[key] = n
        if len(self._counts) > self.max_entries:
            self._counts.popitem(last=False)
        return n

    def estimate(self, messages: Sequence[Message]) -> int:
        """Sum of the cached per-message counts (new messages are counted once)."""
        return sum(self.message_tokens(m) for m in messages)

    def fits(self, messages: Sequence[Message], limit: int, *, margin: float = 0.1,
             tools: Sequence[Mapping[str, Any]] | None = None) -> bool:
        """Whether the full prompt fits ``limit`` tokens: from the cached sum when it
        is well under the limit, else from one count of the full render."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        if not tools and self.estimate(messages) <= limit * (1 - margin):
            return True
        return self.counter.count_prompt(messages, tools=tools) <= limit
