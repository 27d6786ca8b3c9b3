"""Twins the fuzz targets need that ``tests/reference/`` does not have yet.

Slow and obviously correct, written from the native docstrings. (They belong in
``tests/reference/sections.py``; they live here until that module takes them.)
"""

from __future__ import annotations


def newline_sync(text: str, tok_start: list[int], start: int, end: int) -> tuple[int, int, int]:
    """The first and last newline sync points in ``[start, end]`` and the tokens starting
    between them: a sync point is either end of the text, or a position right after
    ``\\n`` whose character is not whitespace (``str.isspace``)."""
    n = len(text)
    if not 0 <= start <= end <= n:
        raise ValueError(f"need 0 <= start <= end <= {n}, got {start}, {end}")

    def sync(i: int) -> bool:
        return i <= 0 or i >= n or (text[i - 1] == "\n" and not text[i].isspace())

    points = [i for i in range(start, end + 1) if sync(i)]
    if not points:
        return -1, -1, 0
    first, last = points[0], points[-1]
    return first, last, sum(1 for s in tok_start if first <= s < last)


def dialect_table_accepts(kinds: object) -> bool:
    """Whether ``lineindex.DialectTable`` must accept this table of plain kinds: at most
    32 names, each a str of 1-64 ASCII characters, each kind MESSAGE, COMPACTION or
    OTHER (anything equal to 1, 2 or 3: ``True`` and ``1.0`` are MESSAGE too)."""
    if not isinstance(kinds, dict) or len(kinds) > 32:
        return False
    return all(isinstance(k, str) and k.isascii() and 1 <= len(k) <= 64 and v in (1, 2, 3)
               for k, v in kinds.items())


def _ascii_name(name: object) -> bool:
    return isinstance(name, str) and name.isascii() and 1 <= len(name) <= 64


def qualified_kind_accepts(kind: object, path: object, values: tuple) -> bool:
    """Whether ``lineindex.QualifiedKind(kind, path, *values)`` must be accepted: kind
    MESSAGE or COMPACTION; a path of one or two keys joined by a dot, each 1-64 ASCII
    characters, the first not ``"type"``; 1-4 values of 1-64 ASCII characters."""
    if kind not in (1, 2) or not isinstance(path, str):
        return False
    keys = path.split(".")
    return (len(keys) <= 2 and all(map(_ascii_name, keys)) and keys[0] != "type"
            and 0 < len(values) <= 4 and all(map(_ascii_name, values)))
