"""What every benchmark records about the run: interpreter, packages, commit, machine."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import pathlib
import platform
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


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


def run_facts(packages: tuple[str, ...]) -> dict:
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


def run_header(args, versions: dict) -> dict:
    """The first keys of every benchmark's JSON: when, how it was invoked, with what."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "args": vars(args),
        "versions": versions,
        "loadavg_start": os.getloadavg(),
    }
