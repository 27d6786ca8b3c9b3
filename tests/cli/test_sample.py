"""``boundctx sample``: a sample appears at its path complete or not at all."""

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from boundctx.cli import main
from boundctx.transcript import Transcript
from boundctx.transcript.sample import PARTIAL_NAME, write_sample

# Big enough that the run is still writing when the test acts on it (200M takes only a
# few seconds); it is stopped after its first kilobytes, never finished.
UNFINISHED_SIZE = "1G"
# A bound on waiting for a state of the real process, so a broken run fails, not hangs.
WAIT_S = 300


def partials(folder, name):
    """The temporary files a sample of ``name`` left (or is writing) in ``folder``."""
    return sorted(n for n in os.listdir(folder)
                  if (m := PARTIAL_NAME.fullmatch(n)) and m["name"] == name)


def start_sample(path, *extra):
    """Start ``python -m boundctx sample PATH --size 200M`` and return it once its
    temporary file exists and has been seen growing (polling the folder)."""
    proc = subprocess.Popen([sys.executable, "-m", "boundctx", "sample", str(path), "--size", UNFINISHED_SIZE,
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    folder, name = os.path.split(path)
    sizes = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        found = partials(folder, name)
        if found:
            try:
                sizes.append(os.path.getsize(os.path.join(folder, found[0])))
            except FileNotFoundError:
                pass
            if len(sizes) >= 2 and sizes[-1] > sizes[0]:
                return proc
        time.sleep(0.02)
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"the sample never showed a growing temporary file (exit {proc.returncode}, sizes {sizes[-3:]}, "
                f"folder {os.listdir(folder)}): {err.decode(errors='replace')[-2000:]}")


def stop(proc, sig):
    """Send ``sig`` and wait for the process: (exit status, stderr)."""
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=WAIT_S)
    return proc.returncode, err.decode(errors="replace")


def test_an_interrupted_sample_exits_130_and_leaves_nothing(tmp_path):
    path = tmp_path / "s.jsonl"
    proc = start_sample(path)
    code, err = stop(proc, signal.SIGINT)
    assert code == 130 and "interrupted" in err
    assert os.listdir(tmp_path) == []  # no PATH, no temporary file


def test_an_interrupted_forced_sample_keeps_the_file_it_would_have_replaced(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"type":"session","version":3,"id":"old"}\n')
    proc = start_sample(path, "--force")
    assert path.read_bytes() == b'{"type":"session","version":3,"id":"old"}\n'  # not truncated at the start
    code, _ = stop(proc, signal.SIGINT)
    assert code == 130
    assert os.listdir(tmp_path) == ["s.jsonl"]
    assert path.read_bytes() == b'{"type":"session","version":3,"id":"old"}\n'


def test_a_killed_sample_leaves_only_a_recognisable_partial_that_later_runs_ignore(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    proc = start_sample(path)
    code, _ = stop(proc, signal.SIGKILL)  # nothing can clean up after a kill -9
    assert code == -signal.SIGKILL
    assert not path.exists()
    leftover = partials(tmp_path, "s.jsonl")
    assert len(leftover) == 1 and os.listdir(tmp_path) == leftover
    assert leftover[0].startswith(".") and not leftover[0].endswith(".jsonl")

    # A later run neither refuses because of it nor reuses it: PATH is a whole new sample.
    assert main(["sample", str(path), "--size", "200k", "--seed", "7"]) == 0
    reference = tmp_path / "ref" / "s.jsonl"
    reference.parent.mkdir()
    write_sample(reference, target_bytes=200 << 10, seed=7, compaction_every=500)
    assert path.read_bytes() == reference.read_bytes()
    assert partials(tmp_path, "s.jsonl") == leftover  # another run's file is not touched
    # ...and it is not taken for a transcript.
    capsys.readouterr()
    assert main(["reindex", str(tmp_path)]) == 0
    assert ".partial" not in capsys.readouterr().out


def test_a_failing_sample_removes_its_temporary_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"old\n")

    def fail(done):
        assert partials(tmp_path, "s.jsonl")  # the sample is being written beside PATH
        assert path.read_bytes() == b"old\n"
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        # Big outputs every message: past the first 16 MiB progress report in a few steps.
        write_sample(path, target_bytes=20 << 20, big_every=1, big_bytes=(4 << 20, 5 << 20), progress=fail)
    assert os.listdir(tmp_path) == ["s.jsonl"] and path.read_bytes() == b"old\n"


def test_write_sample_without_replace_refuses_an_existing_path(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"old\n")
    with pytest.raises(FileExistsError, match="exists"):
        write_sample(path, target_bytes=10_000, replace=False)
    assert os.listdir(tmp_path) == ["s.jsonl"] and path.read_bytes() == b"old\n"


def test_a_sample_is_a_complete_transcript_with_a_plain_files_mode(tmp_path):
    path = tmp_path / "s.jsonl"
    old = os.umask(0o027)
    try:
        counts = write_sample(path, target_bytes=100_000, compaction_every=50)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640  # 0666 less the umask, as open() gives
    assert os.listdir(tmp_path) == ["s.jsonl"] and path.stat().st_size == counts["bytes"]
    with Transcript.open(path) as t:
        assert t.message_count == counts["messages"] and t.compaction_count == counts["compactions"]


def test_sample_replaces_the_file_a_symlink_points_to(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert main(["sample", str(link), "--size", "50k", "--force"]) == 0
    assert link.is_symlink() and target.read_bytes().startswith(b'{"type":"session"')
    assert sorted(os.listdir(tmp_path)) == ["link.jsonl", "real.jsonl"]


def test_sample_into_a_missing_folder_is_refused_with_exit_2(tmp_path, capsys):
    assert main(["sample", str(tmp_path / "nope" / "s.jsonl")]) == 2
    assert "no folder" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_a_sample_that_cannot_be_put_in_place_exits_1_and_leaves_no_partial(tmp_path, capsys):
    target = tmp_path / "d.jsonl"
    target.mkdir()  # a folder where the file should go: the final rename fails (as root too)
    assert main(["sample", str(target), "--size", "20k", "--force"]) == 1
    assert "nothing was written" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["d.jsonl"] and target.is_dir() and os.listdir(target) == []
