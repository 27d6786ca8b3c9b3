"""Fault campaign 5: a disk that fills up, on a small tmpfs (:func:`disk_full`)."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from boundctx import Transcript

from .core import (
    Child,
    ChildDied,
    ChildHung,
    Key,
    KiB,
    Tally,
    check_reads,
    draw_size,
    judge_file,
    key_of,
    make_record,
    run_role,
    say,
    settle,
    side_file_problem,
    temp_copies,
    torn_side_files,
)


def mount_small_tmpfs(folder: Path, size: str = "2m") -> str | None:
    """Mount a tmpfs of ``size`` on ``folder``; None when done, else why it cannot be."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return "mounting a tmpfs needs root (run as root, e.g. in a container that allows mounts)"
    if shutil.which("mount") is None:
        return "no mount command"
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"mount -t tmpfs failed to run: {exc}"
    if r.returncode:
        return (f"mount -t tmpfs failed ({(r.stderr or r.stdout).strip()}): this container "
                "forbids mounts (needs CAP_SYS_ADMIN)")
    why = resize_tmpfs(folder, size)  # the campaign frees space by growing it
    if why:
        unmount(folder)
        return f"the tmpfs cannot be resized ({why})"
    return None


def resize_tmpfs(folder: Path, size: str) -> str | None:
    """Grow (or shrink) the tmpfs on ``folder``; None when done, else why not."""
    r = subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)],
                       capture_output=True, text=True, timeout=30)
    return (r.stderr or r.stdout).strip() or "remount failed" if r.returncode else None


def unmount(folder: Path) -> None:
    r = subprocess.run(["umount", str(folder)], capture_output=True, timeout=30)
    if r.returncode:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def disk_full(mount: Path, *, rounds: int, seed: int) -> Tally:
    """On a 2 MiB tmpfs (mounted by :func:`mount_small_tmpfs`) partly filled by a
    ballast file, a process appends records of 1 KiB-5 MiB until the disk is full.

    - The failing append must raise an OSError (a clear one: ENOSPC, or a short write
      that says the disk may be full) and lose nothing acknowledged; a second try
      fails the same way.
    - Space is freed (the ballast deleted and the tmpfs grown to 8 MiB: a short write
      leaves a torn tail, and moving it aside takes as much room again) and the same
      open Transcript appends again: the torn tail moved aside as the start of the
      record that failed, reads showing exactly the file.
    - The disk is filled again and an edit (a full-history rewrite, which needs room
      for a whole copy) must fail with an OSError, leaving the transcript byte for
      byte as it was and no temporary copy; with room again, the same edit works.
    """
    tally = Tally("disk full (2 MiB tmpfs)")
    rng = random.Random(seed)
    started = time.monotonic()
    mount = Path(mount)
    path, ballast = mount / "t.jsonl", mount / "ballast"
    for r in range(rounds):
        for p in mount.iterdir():
            p.unlink()
        if (why := resize_tmpfs(mount, "2m")):
            tally.problem(f"round {r}: cannot shrink the tmpfs back to 2 MiB: {why}")
            break
        ballast.write_bytes(b"\0" * rng.randint(0, 1536 * KiB))
        attempted: dict[str, Key] = {}
        acked: set[str] = set()
        child = Child("fill", path, rng.randrange(2**32), f"f{r}", module=__name__)

        def take(line: str) -> dict | None:
            """Note a try or an ack; return an error's details."""
            word, body = line.split(" ", 1)
            if word == "try":
                rid, size = body.split()
                attempted[rid] = (rid, 0, int(size))
            elif word == "ack":
                acked.add(body.split()[0])
                tally.acknowledged += 1
            elif word == "error":
                return json.loads(body)
            return None

        def rewrite() -> dict | None:
            """Ask for an edit of message 0; return the error, or None when it worked."""
            child.send("rewrite")
            _, outcome, body = child.expect("rewrite").split(" ", 2)
            if outcome == "error":
                return json.loads(body)
            if json.loads(body):  # message 0 is its next revision now, 2 KiB long
                rid, rev, _ = json.loads(body)
                attempted[rid] = (rid, rev + 1, 2 * KiB)
            return None

        try:
            child.expect("ready")
            errors = []
            while len(errors) < 2:
                line = child.readline()
                if line is None:
                    raise ChildDied(f"fill ended early{child.stderr_tail()}")
                if (e := take(line)):
                    errors.append(e)
            tally.faults += 1
            for e in errors:
                if "OSError" not in e["mro"]:
                    tally.wrong += 1
                    tally.problem(f"round {r}: a full disk raised {e['type']} (not an OSError): {e['message']}")
                elif not (e["errno"] == errno.ENOSPC or "full" in e["message"]):
                    tally.problem(f"round {r}: the error does not say the disk is full: {e['message']}")
                tally.note(f"full-disk errors: {e['type']} errno={e['errno']}")
            full = judge_file(tally, path, attempted, acked, f"round {r}, disk full")

            # Free space; the same open Transcript appends again.
            ballast.unlink()
            vfs = os.statvfs(mount)
            if full.torn and vfs.f_bavail * vfs.f_frsize < full.torn + 64 * KiB:
                # Deleting the ballast alone would not do: the torn tail is copied to a
                # side file before it is cut off, so appends fail until that fits too.
                tally.note("rounds where the freed ballast was too small to move the torn tail aside")
            if (why := resize_tmpfs(mount, "8m")):
                raise ChildDied(f"cannot grow the tmpfs: {why}")
            for _ in range(3):
                child.send("append")
                while (line := child.readline()) is not None and not line.startswith(("ack", "error")):
                    take(line)
                if line is None or (e := take(line)):
                    tally.crashes += 1
                    tally.problem(f"round {r}: after freeing space the append failed: {line}")
            scan = judge_file(tally, path, attempted, acked, f"round {r}, after freeing")
            if scan.torn:
                tally.wrong += 1
                tally.problem(f"round {r}: {scan.torn} torn bytes left after appending on a freed disk")

            # Full again: a rewrite must fail cleanly, then work once there is room.
            vfs = os.statvfs(mount)
            try:  # every free block: even the smallest copy cannot fit
                Path(str(ballast) + "2").write_bytes(b"\0" * (vfs.f_bavail * vfs.f_frsize))
            except OSError:
                pass
            before = path.read_bytes()
            e = rewrite()
            tally.faults += 1
            if e is None:
                tally.note("full-disk rewrites that fitted")
            else:
                tally.note(f"full-disk rewrites refused: {e['type']} errno={e['errno']}")
                if "OSError" not in e["mro"]:
                    tally.wrong += 1
                    tally.problem(f"round {r}: a rewrite on a full disk raised {e['type']}: {e['message']}")
                if path.read_bytes() != before:
                    tally.wrong += 1
                    tally.problem(f"round {r}: a rewrite that failed changed the transcript")
            if temp_copies(mount):
                tally.wrong += 1
                tally.problem(f"round {r}: a rewrite on a full disk left {len(temp_copies(mount))} temporary copies")
            Path(str(ballast) + "2").unlink()
            if (e := rewrite()) is not None:
                tally.crashes += 1
                tally.problem(f"round {r}: with room again the rewrite failed: {e['type']}: {e['message']}")
            else:
                tally.acknowledged += 1
            child.end_input()
            for line in child.drain():
                take(line)
            settle(tally, child, killed=False)
        except (ChildHung, ChildDied) as exc:
            tally.child_failed(exc, f"round {r}")
            continue
        finally:
            child.close()
        scan = judge_file(tally, path, attempted, acked, f"round {r}, at the end")
        problems, _ = check_reads(path, scan.keys, torn=scan.torn)
        for p in problems:
            tally.wrong += 1
            tally.problem(f"round {r}: {p}")
        sides = torn_side_files(path)
        for side in sides:
            if (p := side_file_problem(side, attempted)):
                tally.wrong += 1
                tally.problem(f"round {r}: {p}")
        if len(sides) > bool(full.torn):
            # Each append that failed while moving the tail aside left its side file,
            # empty or holding part of the tail, beside the one that succeeded.
            tally.note("extra torn side files left by appends that failed on the full disk",
                       len(sides) - bool(full.torn))
    tally.seconds = time.monotonic() - started
    return tally


# -- the child's roles ---------------------------------------------------------------


def role_fill(path: str, seed: str, writer: str) -> None:
    """Append until the disk is full, and once more; then obey stdin: "append" (1 KiB),
    "rewrite" (edit message 0 into its next revision, 2 KiB); close at EOF."""
    rng = random.Random(int(seed))
    t = Transcript.open(path, create=True)
    say("ready")

    def failure(exc: BaseException) -> str:
        return json.dumps({"type": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
                           "errno": getattr(exc, "errno", None), "message": str(exc)})

    def attempt(rid: str, size: int) -> bool:
        say(f"try {rid} {size}")
        try:
            t.append(make_record(rid, size))
        except Exception as exc:
            say("error " + failure(exc))
            return False
        say(f"ack {rid} {size}")
        return True

    seq = 0
    while attempt(f"{writer}.{seq}", draw_size(rng, big=0.1)):
        seq += 1
    attempt(f"{writer}.{seq + 1}", KiB)
    extra = 0
    for command in sys.stdin:
        if command.strip() == "append":
            attempt(f"{writer}.after{extra}", KiB)
            extra += 1
        elif command.strip() == "rewrite":
            try:
                first = t.window(message_limit=1, message_before=1).messages[0] if t.message_count else None
                key = first and key_of(first.record)
                if first is not None:
                    t.edit(first, make_record(key[0], 2 * KiB, key[1] + 1))
                say("rewrite ok " + json.dumps(key))
            except Exception as exc:
                say("rewrite error " + failure(exc))
    t.close()


ROLES = {"fill": role_fill}

if __name__ == "__main__":
    run_role(ROLES)
