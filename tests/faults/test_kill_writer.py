"""kill -9 of a writer: nothing acknowledged is lost, a partial write is only a torn tail.

The campaign (``kill_writer.kill_writers``) kills real writer processes at random points;
the fixed cases below kill one at a chosen point, so each outcome is certain.
"""

import signal

from boundctx import Transcript

from . import core, kill_writer
from .core import assert_clean


def test_acknowledged_records_survive_kill_9_at_random_points(tmp_path):
    tally = kill_writer.kill_writers(tmp_path, kills=core.scaled(20), seed=20261201)
    assert_clean(tally)
    assert tally.faults == core.scaled(20) and tally.acknowledged > tally.faults
    # The campaign tears writes on purpose (a quarter of the kills): the torn-tail path
    # ran, and every torn tail was resolved by the next append (checked per kill).
    assert tally.notes.get("kills that left a torn tail", 0) > 0


def die_mid_append(path):
    """A writer that acknowledges d.0, then dies halfway through writing d.1."""
    with core.Child("die-mid-append", path, module=kill_writer.__name__) as child:
        assert child.readline() == "ack d.0"
        assert child.drain() == []
        assert child.wait() == -signal.SIGKILL
    return core.line_of(("d.1", 0, 64 * core.KiB))


def test_a_writer_killed_mid_write_leaves_only_a_torn_tail_that_the_next_append_moves_aside(tmp_path):
    path = tmp_path / "t.jsonl"
    unfinished = die_mid_append(path)
    scan = core.scan_file(path)
    assert scan.keys == [("d.0", 0, core.KiB)] and scan.bad == []
    assert scan.torn == len(unfinished) // 2  # half a line: never a record
    problems, _ = core.check_reads(path, scan.keys, torn=scan.torn)
    assert problems == []
    assert core.follow_up_append(path, ("after.0", 0, core.KiB)) == []
    assert core.scan_file(path).keys == [("d.0", 0, core.KiB), ("after.0", 0, core.KiB)]
    (side,) = core.torn_side_files(path)
    assert side.read_bytes() == unfinished[: len(unfinished) // 2]  # moved aside, not deleted


def test_history_works_after_the_writer_died_mid_append(tmp_path):
    path = tmp_path / "t.jsonl"
    die_mid_append(path)
    with Transcript.open(path) as t:  # a new process's view: nobody is writing
        h_ = t.history()
    assert [core.key_of(h_.message(i)) for i in range(h_.message_count)] == [("d.0", 0, core.KiB)]


def test_edit_works_after_the_writer_died_mid_append(tmp_path):
    path = tmp_path / "t.jsonl"
    die_mid_append(path)
    with Transcript.open(path) as t:
        t.edit(0, core.make_record("d.0", 2 * core.KiB, 1))
    assert core.scan_file(path).keys == [("d.0", 1, 2 * core.KiB)]
