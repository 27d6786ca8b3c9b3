"""Evaluated model states kept for later prompts: a bounded, least-recently-used cache.

A local model's context holds one evaluated prompt at a time. When a call is about to
throw away a long evaluated prefix (a section worker runs between two replies, or
another conversation takes its turn on the same model), the provider copies the state
of the prefix out (llama.cpp's per-sequence state: the KV cells, a few tens of
milliseconds) into this cache, and a later prompt that starts the same way copies it
back instead of evaluating it again (decision 0030).

The cache knows token lists and opaque bytes only: what a state is and how it is
restored is the provider's business. It never decides what is evaluated, only what
could be restored; a miss costs an evaluation, never a wrong reply.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

__all__ = ["KeptState", "StateCache", "common_prefix"]


def common_prefix(held: np.ndarray, tokens: np.ndarray) -> int:
    """Length of the longest common start of two token arrays."""
    n = min(len(held), len(tokens))
    if n == 0:
        return 0
    diff = np.flatnonzero(held[:n] != tokens[:n])
    return int(diff[0]) if diff.size else n


class KeptState:
    """One evaluated prefix: its tokens and the state bytes that restore it."""

    __slots__ = ("data", "tokens")

    def __init__(self, tokens: np.ndarray, data: bytes) -> None:
        self.tokens = tokens
        self.data = data

    @property
    def size(self) -> int:
        """Bytes this entry holds (the state and its tokens)."""
        return len(self.data) + self.tokens.nbytes


class StateCache:
    """At most ``limit_bytes`` of :class:`KeptState`, least recently used out first.

    Thread-safe: the provider stores and restores under its model lock, while
    :meth:`best` may be asked from any thread (a turn's progress says what it will
    reuse before the model is free).
    """

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 0:
            raise ValueError(f"limit_bytes must be >= 0, got {limit_bytes}")
        self.limit_bytes = int(limit_bytes)
        self._entries: OrderedDict[int, KeptState] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        #: Bytes held now.
        self.bytes = 0
        #: Prefixes restored, stored, and stored ones pushed out to make room.
        self.restored = 0
        self.stored = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict[str, int]:
        """What the cache holds and has done (for progress, a status page, a bench)."""
        with self._lock:
            return {"entries": len(self._entries), "bytes": self.bytes, "limit_bytes": self.limit_bytes,
                    "restored": self.restored, "stored": self.stored, "evicted": self.evicted}

    def best(self, tokens: Sequence[int] | np.ndarray) -> tuple[int, KeptState | None]:
        """The entry sharing the longest start with ``tokens``, and that length (0 and
        None when no entry shares a token). The entry is not marked as used."""
        tokens = np.asarray(tokens)
        with self._lock:
            best_len, best = 0, None
            for entry in self._entries.values():
                n = common_prefix(entry.tokens, tokens)
                if n > best_len:
                    best_len, best = n, entry
            return best_len, best

    def holds(self, tokens: np.ndarray) -> bool:
        """Whether an entry covers ``tokens`` whole (they are its start or all of it):
        storing them again would keep nothing new."""
        with self._lock:
            return any(len(e.tokens) >= len(tokens) and common_prefix(e.tokens, tokens) == len(tokens)
                       for e in self._entries.values())

    def used(self, entry: KeptState) -> None:
        """Mark ``entry`` as restored just now (last to go)."""
        with self._lock:
            for key, held in self._entries.items():
                if held is entry:
                    self._entries.move_to_end(key)
                    self.restored += 1
                    return

    def forget(self, entry: KeptState) -> None:
        """Drop ``entry`` (a state the model refused to take back)."""
        with self._lock:
            for key, held in list(self._entries.items()):
                if held is entry:
                    del self._entries[key]
                    self.bytes -= entry.size

    def put(self, tokens: np.ndarray, data: bytes) -> bool:
        """Keep the state of ``tokens``; False when it alone is over the limit.

        Entries whose tokens are the start of ``tokens`` go: any prompt shares at least
        as much with the new one. The least recently used go next, until it fits.
        """
        entry = KeptState(np.array(tokens, copy=True), data)
        if entry.size > self.limit_bytes:
            return False
        with self._lock:
            for key, held in list(self._entries.items()):
                if len(held.tokens) <= len(entry.tokens) and \
                        common_prefix(held.tokens, entry.tokens) == len(held.tokens):
                    del self._entries[key]
                    self.bytes -= held.size
            while self.bytes + entry.size > self.limit_bytes:
                _, oldest = self._entries.popitem(last=False)
                self.bytes -= oldest.size
                self.evicted += 1
            self._entries[self._next] = entry
            self._next += 1
            self.bytes += entry.size
            self.stored += 1
            return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0
