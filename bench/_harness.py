"""What every benchmark shares: timing, the summary of samples, markdown tables, the
facts of the run (interpreter, packages, commit, machine) and sizes.

The scripts run as modules from the repository root (``python -m bench.<script>``), so
the root is on ``sys.path``: they import this as ``bench._harness`` and borrow from the
test tree as packages (the reference twins ``tests.reference``, the fault campaigns
``tests.faults``, the test doubles ``tests._support``).
"""

from __future__ import annotations

import datetime
import gc
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

ROOT = pathlib.Path(__file__).resolve().parent.parent

__all__ = ["ROOT", "Timed", "callgrind_instructions", "command_line", "command_output", "human_size",
           "labelled_run", "markdown_table", "parse_size", "read_through", "run_facts", "run_header", "summary",
           "timed"]


# -- timing -----------------------------------------------------------------------------


class Timed(NamedTuple):
    """The samples of :func:`timed`: seconds per timed call, by the wall clock
    (``time.perf_counter``) and by the process's CPU clock (``time.process_time``,
    every thread), and the last call's result."""

    wall_s: list[float]
    cpu_s: list[float]
    result: Any


def timed(fn: Callable[..., Any], repeats: int, *, warmup: int = 1, setup: Callable[[], tuple] | None = None,
          teardown: Callable[[Any], None] | None = None, check: Callable[[Any], None] | None = None) -> Timed:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed.

    ``setup()`` (untimed) returns fn's argument tuple; ``check(result)`` and then
    ``teardown(result)`` run untimed after each call, warm-ups included, so a fast
    wrong answer stops the run. The previous result is freed and the garbage collector
    run before each call, outside the timed region. The wall clock is read inside the
    CPU clock's reads, so it times the call alone.
    """
    wall: list[float] = []
    cpu: list[float] = []
    result = None
    for i in range(warmup + repeats):
        args = setup() if setup is not None else ()
        result = None  # free the previous result outside the timed region
        gc.collect()
        c0 = time.process_time()
        w0 = time.perf_counter()
        result = fn(*args)
        w1 = time.perf_counter()
        c1 = time.process_time()
        if check is not None:
            check(result)
        if teardown is not None:
            teardown(result)
        if i >= warmup:
            wall.append(w1 - w0)
            cpu.append(c1 - c0)
    return Timed(wall, cpu, result)


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1) by nearest rank: the smallest value with at least
    ``q`` of the values at or below it; nan when there are none. Every script reports
    its p90s and p99s by this one rule."""
    s = sorted(values)
    # q * n can land a hair above a whole rank (0.7 * 10 == 7.000000000000001)
    return s[max(0, math.ceil(q * len(s) - 1e-9) - 1)] if s else math.nan


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """Median, p90 (nearest rank), min, max and count of ``samples`` seconds; the
    samples themselves when there are at most 60."""
    s = sorted(samples)
    n = len(s)
    return {
        "median_s": statistics.median(s),
        "p90_s": percentile(s, 0.9),
        "min_s": s[0],
        "max_s": s[-1],
        "n": n,
        "samples_s": list(samples) if n <= 60 else None,
    }


# -- output -----------------------------------------------------------------------------


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], *,
                   align: str | Sequence[str] = "---") -> str:
    """A markdown table: the header, the separator (``align`` for every column, or one
    per column: ``"---:"`` right-aligns), one line per row. Cells are ``str()``-ed; a
    row shorter than the header gets empty cells."""
    width = len(header)
    separators = [align] * width if isinstance(align, str) else list(align)
    lines = [_line(header), "|" + "|".join(separators) + "|"]
    for row in rows:
        cells = [str(c) for c in row]
        lines.append(_line(cells + [""] * (width - len(cells))))
    return "\n".join(lines)


def _line(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def parse_size(text: str) -> int:
    """``1G`` -> 1 GiB, ``64M`` -> 64 MiB, ``1.5K``, ``1000000`` -> bytes."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in units else ""
    number = t[: len(t) - len(unit)] if unit else t
    return int(float(number) * units[unit])


def human_time(s: float | None) -> str:
    """Seconds as a table shows them: s, ms or µs by size (None: a dash)."""
    if s is None:
        return "—"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} µs"


def human_size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n} B"


def read_through(path: str, passes: int = 1) -> float:
    """Read the whole file ``passes`` times in 16 MiB chunks, so it is in the page
    cache (a cold open then measures the scan, not the disk). The seconds it took."""
    buf = bytearray(16 << 20)
    started = time.perf_counter()
    for _ in range(passes):
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - started


# -- the run's facts --------------------------------------------------------------------


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def command_output(*argv: str) -> str | None:
    """stdout of a short command run in the repository, or None if it cannot run."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_facts(packages: tuple[str, ...]) -> dict[str, Any]:
    """Interpreter, the given packages' versions, the commit and the machine."""
    status = command_output("git", "status", "--porcelain")
    return {
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "executable": sys.executable,
        "packages": {p: package_version(p) for p in packages},
        "git_commit": command_output("git", "rev-parse", "HEAD"),
        "git_dirty_files": None if status is None else len(status.splitlines()),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
    }


def command_line() -> str:
    """How this run was invoked, as one would type it again: ``python -m bench.<script>
    ARGS`` for a script run as a module."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    head = ["-m", spec.name] if spec is not None else sys.argv[:1]
    return " ".join([os.path.basename(sys.executable), *head, *sys.argv[1:]])


def run_header(args, versions: dict[str, Any]) -> dict[str, Any]:
    """The first keys of every benchmark's JSON: when, how it was invoked, with what."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "args": vars(args),
        "versions": versions,
        "loadavg_start": os.getloadavg(),
    }


def callgrind_instructions(module: str, *args: str) -> tuple[int, list[str], str]:
    """Instructions callgrind counts (Ir: user space, every thread) while ``python -m
    module args`` runs from the repository root, with a fixed hash seed; the command and
    what it printed."""
    import tempfile

    from tests._support import importable_env

    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "callgrind.out"
        # A parent started with -S (no site: another checkout measured through
        # PYTHONPATH, past an editable install's import hook) starts its child so too.
        no_site = ["-S"] if sys.flags.no_site else []
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *no_site, "-m",
                   module, *args]
        run = subprocess.run(command, capture_output=True, text=True, check=True,
                             cwd=ROOT, env=importable_env({**os.environ, "PYTHONHASHSEED": "0"}))
        (totals,) = [line for line in out.read_text().splitlines() if line.startswith("totals:")]
    return int(totals.split()[1]), command, run.stdout


def labelled_run(path: pathlib.Path, label: str, run: dict[str, Any], *, measure: str, how: str) -> dict[str, Any]:
    """Keep ``run`` under ``label`` in the JSON at ``path`` (other labels' runs stay), and
    once both ``before`` and ``after`` are there, the ratio of ``measure`` per case;
    returns the document written."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    runs = doc.setdefault("runs", {})
    runs[label] = run
    if "before" in runs and "after" in runs:
        before, after = runs["before"]["cases"], runs["after"]["cases"]
        doc["ratio_after_to_before"] = {case: round(after[case][measure] / before[case][measure], 6)
                                        for case in sorted(before.keys() & after.keys())}
    doc["how"] = how
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc
