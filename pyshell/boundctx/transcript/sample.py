"""Seeded synthetic transcripts: for the CLI's first run, tests and benchmarks.

The mix follows what long agent sessions look like: mostly 200-2000-byte messages,
now and then a tool output of a megabyte or more, text in several scripts and emoji,
code with escapes, a compaction line every few thousand messages.

A sample is written to a temporary file beside its path and renamed into place only
when complete, so an interrupted or failed run leaves nothing half-written at the path.
"""

from __future__ import annotations

import math
import os
import random
import re
import secrets
from collections.abc import Callable

from boundctx._atomic import replacing
from boundctx.transcript.lineformat import encode_record

__all__ = ["PARTIAL_NAME", "write_sample"]

#: The name of a sample still being written: ``.<name>.<hex>.partial`` beside its path.
#: Hidden, never ``*.jsonl``, unique per run: one left by a killed run (``kill -9``
#: cannot clean up) is safe to delete and is never read or reused by a later run.
PARTIAL_NAME = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{16}\.partial")

_WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an "
    "session window layout message transcript model token budget section worker notes "
    "append rewrite offset index compaction summary context prompt reply tool result "
    "def return import class self None True False await async yield lambda "
    "Привет мир данные 你好 世界 数据 分析 안녕하세요 세계 مرحبا بالعالم 🙂 👩‍💻 🚀 é ñ ü ß"
).split()
_CODE = ['if x == "a\\\\b":', "\tprint(f'{y!r}')", 'path = "C:\\\\Users\\\\me"', "}", "{", "x += 1"]
_ROLES = ("user", "assistant", "toolResult")


def _text(rng: random.Random, nbytes: int) -> str:
    out: list[str] = []
    size = 0
    while size < nbytes:
        if rng.random() < 0.08:
            piece = rng.choice(_CODE) + "\n"
        else:
            piece = " ".join(rng.choices(_WORDS, k=12)) + ("\n" if rng.random() < 0.2 else " ")
        out.append(piece)
        size += len(piece.encode())
    return "".join(out)


def _tool_output(rng: random.Random, nbytes: int) -> str:
    # Tile a generated block of log lines: realistic shape, cheap to make at megabytes.
    block = "".join(
        f"{i:06d} INFO worker[{rng.randrange(64)}] step={rng.randrange(10**6)} "
        f"{' '.join(rng.choices(_WORDS, k=8))}\n" for i in range(400))
    reps = max(1, nbytes // max(1, len(block.encode())))
    return block * reps


def _partial_name(name: str) -> str:
    return f".{name}.{secrets.token_hex(8)}.partial"


def write_sample(path: str | os.PathLike, *, target_bytes: int = 2_000_000, seed: int = 1234,
                 big_every: int = 2000, big_bytes: tuple[int, int] = (1 << 20, 5 << 20),
                 compaction_every: int = 5000, replace: bool = True, sync: bool = True,
                 progress: Callable[[int], object] | None = None) -> dict[str, int]:
    """Write a seeded transcript of about ``target_bytes`` to ``path``.

    The sample is written to a temporary file in the same folder (named as
    :data:`PARTIAL_NAME` says), flushed to disk and renamed onto ``path`` only once
    complete; on any error or ``KeyboardInterrupt`` the temporary file is removed and
    ``path`` is left as it was. Through a symlink, the file it points to is replaced.

    Parameters
    ----------
    path : path
        Where the sample goes.
    replace : bool
        Replace an existing ``path`` (at the end, never before the sample is complete);
        with ``False`` an existing ``path`` is refused, at the start and again before
        the rename.
    sync : bool
        ``fsync`` the sample before the rename, so a power cut cannot leave a renamed
        but incomplete file.
    progress : callable, optional
        Called with the bytes written so far, every 16 MiB.

    Returns
    -------
    dict
        Counts: ``bytes``, ``lines``, ``messages``, ``compactions``.

    Raises
    ------
    FileExistsError
        ``path`` exists and ``replace`` is false.
    """
    if not replace and os.path.lexists(path):
        raise FileExistsError(f"{os.fspath(path)!r} exists; pass replace=True to replace it")
    with replacing(path, temp_name=_partial_name, sync=sync) as f:
        counts = _write(f, target_bytes=target_bytes, seed=seed, big_every=big_every,
                        big_bytes=big_bytes, compaction_every=compaction_every, progress=progress)
        if not replace and os.path.lexists(path):
            raise FileExistsError(f"{os.fspath(path)!r} appeared while the sample was written; "
                                  "it was left as it is")
    return counts


def _write(f, *, target_bytes: int, seed: int, big_every: int, big_bytes: tuple[int, int],
           compaction_every: int, progress: Callable[[int], object] | None) -> dict[str, int]:
    """The sample's lines into the binary file ``f``; the counts."""
    rng = random.Random(seed)
    counts = {"bytes": 0, "lines": 0, "messages": 0, "compactions": 0}
    lo, hi = math.log(200), math.log(2000)

    def emit(rec: dict) -> None:
        line = encode_record(rec)
        f.write(line)
        counts["bytes"] += len(line)
        counts["lines"] += 1

    emit({"type": "session", "version": 3, "id": f"sample-{seed}", "timestamp": "2026-01-01T00:00:00Z",
          "cwd": "/home/user/project"})
    last_report = 0
    parent = None  # each entry names the one before it, a compaction included (pi's chain)
    while counts["bytes"] < target_bytes:
        n = counts["messages"]
        role = _ROLES[n % 3] if n % 7 else "user"
        if big_every and n and n % big_every == 0:
            body = _tool_output(rng, rng.randrange(*big_bytes))
            role = "toolResult"
        else:
            body = _text(rng, int(math.exp(rng.uniform(lo, hi))))
        emit({"type": "message", "id": f"{n:08x}", "parentId": parent,
              "timestamp": f"2026-01-01T00:{(n // 60) % 60:02d}:{n % 60:02d}Z",
              "message": {"role": role, "content": [{"type": "text", "text": body}]}})
        counts["messages"] += 1
        parent = f"{n:08x}"
        if compaction_every and counts["messages"] % compaction_every == 0:
            parent = f"c{n:08x}"
            emit({"type": "compaction", "id": parent, "parentId": f"{n:08x}",
                  "timestamp": "2026-01-01T00:00:00Z",
                  "summary": _text(rng, rng.randrange(2000, 8000)),
                  "firstKeptEntryId": f"{n:08x}", "tokensBefore": 50000})
            counts["compactions"] += 1
        if progress is not None and counts["bytes"] - last_report >= (16 << 20):
            last_report = counts["bytes"]
            progress(counts["bytes"])
    return counts
