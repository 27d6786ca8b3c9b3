"""Bisection for "the longest prefix that still fits", used wherever a text is cut to a
budget that is only known by measuring (tokens, re-encoded bytes)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["longest_fitting"]


def longest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """The largest ``k`` in ``[0, n]`` with ``fits(k)``, for a ``fits`` that holds for
    every length up to some point and for none after it (``fits(0)`` is assumed).

    ``fits(n)`` is tried first: the usual case, everything fits, costs one measurement.
    """
    if fits(n):
        return n
    lo, hi = 0, n - 1
    while lo < hi:  # invariant: fits(lo) holds; fits(hi + 1) does not
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
