"""Rebuild transcript layouts on purpose: one scan, one sidecar, no numpy.

``boundctx reindex`` runs only this (and the CLI's argument parsing): the scan is the
native line index over every core, and the sidecar is written by the same encoder the
layout of an open transcript uses (:mod:`boundctx.transcript.sidecar`), so it is the
sidecar an open would have written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

from boundctx._native import filescan, lineindex
from boundctx.transcript.dialects import dialect_kinds, native_table, settle_undecided
from boundctx.transcript.kinds import DEFAULT_CLASSIFY_WINDOW, LineKind
from boundctx.transcript.opening import open_transcript_fd, resolved_path
from boundctx.transcript.sidecar import (
    FORMAT_VERSION,
    MAGIC,
    Identity,
    beside_allowed,
    encode_header,
    file_hashes,
    segment_pieces,
    write_first_place,
)
from boundctx.transcript.tree import build_tree, id_index, link_keys

__all__ = ["ReindexReport", "reindex"]


class ReindexReport(NamedTuple):
    """What one ``reindex`` did to one file (``_asdict()`` for JSON)."""

    path: str
    ok: bool
    bytes: int = 0
    lines: int = 0
    messages: int = 0
    compactions: int = 0
    corrupt: int = 0
    torn_bytes: int = 0
    sidecar: str | None = None
    seconds: float = 0.0
    error: str | None = None


def reindex(path: str | os.PathLike, *, dialect: str = "auto",
            progress: Callable[[int], object] | None = None) -> ReindexReport:
    """Scan ``path`` from scratch (one scan, whatever sidecar exists) and write its
    layout sidecar.

    Never raises for a bad file: the report says what went wrong (``ok=False``).
    """
    path = os.fspath(path)
    t0 = time.perf_counter()
    try:
        dialect_kinds(dialect)
        fd = open_transcript_fd(path)
        try:
            real = resolved_path(path, fd)
            report, sidecar = _scan_and_encode(fd, path, real, dialect, progress)
            beside = beside_allowed(fd, dialect)
        finally:
            os.close(fd)
        return report._replace(sidecar=write_first_place(sidecar, real, beside=beside),
                               seconds=time.perf_counter() - t0)
    except (OSError, ValueError) as exc:
        return ReindexReport(path=path, ok=False, error=str(exc),
                             seconds=time.perf_counter() - t0)


def _scan_and_encode(fd: int, path: str, real: str, dialect: str, progress) -> tuple[ReindexReport, list]:
    # The identity is taken before the scan and the scan stops at that size, as an
    # open's build does: bytes appended meanwhile are past the recorded size, and the
    # next open sees the file grew.
    st = os.fstat(fd)
    # The scan reads each line's links as it frames it: the file is read once.
    res = filescan.scan_fd(fd, native_table(dialect), end=st.st_size, progress=progress,
                           link_keys=link_keys(dialect))
    ident = Identity.of(st)
    if res.scanned_end != st.st_size:
        ident = Identity(ident.dev, ident.ino, -1, -1)  # shrank mid-scan: judged again
    kinds = settle_undecided(fd, res, dialect)
    messages, compactions = lineindex.sequence_lines(kinds)
    head, tail = file_hashes(fd, res.indexed_end)
    n, m, c = len(kinds), len(messages) // 8, len(compactions) // 8
    tree = build_tree(fd, res.starts, res.indexed_end, kinds, dialect, links=res.links)
    id_keys, id_lines = id_index(tree.ids, tree.up)
    header = encode_header(
        v=FORMAT_VERSION, dialect=dialect, window=DEFAULT_CLASSIFY_WINDOW, path=real,
        start=0, end=res.indexed_end, scanned=res.scanned_end, line0=0, n=n, m=m, c=c,
        k=len(id_keys) // 8, as_list=int(tree.reads_as_list), chain=int(tree.chain), identity=tuple(ident),
        head=head, tail=tail, bad=[])
    report = ReindexReport(
        path=path, ok=True, bytes=res.scanned_end, lines=n, messages=m, compactions=c,
        corrupt=kinds.count(LineKind.CORRUPT), torn_bytes=res.torn_bytes)
    # A chain stores ids alone of its tree arrays (decision 0053).
    arrays: list = [tree.ids] if tree.chain else [tree.ids, tree.up, tree.pos, tree.tip, tree.comp]
    return report, [MAGIC, *segment_pieces(header, res.starts, kinds, messages, compactions,
                                           [*arrays, id_keys, id_lines])]
