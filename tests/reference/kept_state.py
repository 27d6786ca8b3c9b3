"""Slow, obviously-correct twin of :class:`boundctx.providers.kept_state.StateCache`:
a plain list of ``(tokens, size)`` from least to most recently used, every common
start counted one token at a time in Python.

The fast cache must hold the same entries, in the same order, and name the same
longest common start for every prompt.
"""

from __future__ import annotations


def shared_start(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ListStateCache:
    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.entries: list[tuple[tuple[int, ...], int]] = []  # least recently used first

    def used_bytes(self) -> int:
        return sum(size for _, size in self.entries)

    def best(self, tokens) -> int:
        return max((shared_start(t, tokens) for t, _ in self.entries), default=0)

    def best_entry(self, tokens):
        """The first (least recently used) entry with the longest common start."""
        n = self.best(tokens)
        if n == 0:
            return None
        return next(t for t, _ in self.entries if shared_start(t, tokens) == n)

    def holds(self, tokens) -> bool:
        return any(len(t) >= len(tokens) and tuple(t[:len(tokens)]) == tuple(tokens) for t, _ in self.entries)

    def use(self, tokens) -> None:
        for i, (t, size) in enumerate(self.entries):
            if t == tuple(tokens):
                self.entries.append(self.entries.pop(i))
                return

    def put(self, tokens, size: int) -> bool:
        tokens = tuple(tokens)
        if size > self.limit:
            return False
        # A kept start of the new tokens says nothing the new entry does not.
        self.entries = [(t, s) for t, s in self.entries if not (len(t) <= len(tokens) and tokens[:len(t)] == t)]
        while self.used_bytes() + size > self.limit:
            self.entries.pop(0)
        self.entries.append((tokens, size))
        return True
