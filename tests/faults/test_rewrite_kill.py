"""kill -9 during a full-history rewrite (edit, delete, truncate): the old file or the
new one, never a mix, and nothing acknowledged before it lost."""

import os
import signal

from boundctx import Transcript

from . import core, rewrite_kill
from .core import assert_clean


def test_a_rewrite_killed_at_random_points_leaves_the_old_or_the_new_file(tmp_path):
    tally = rewrite_kill.kill_rewriters(tmp_path, kills=core.scaled(8), seed=31337)
    assert_clean(tally)
    assert tally.faults == core.scaled(8) and tally.acknowledged > 0


def die_before_rename(path):
    with core.Child("die-mid-rewrite", path, module=rewrite_kill.__name__) as child:
        child.expect("ready")
        assert child.drain() == []
        assert child.wait() == -signal.SIGKILL


def seeded(tmp_path):
    path = tmp_path / "t.jsonl"
    keys = [(f"r.{i}", 0, 4 * core.KiB) for i in range(5)]
    with Transcript.open(path, create=True) as t:
        for key in keys:
            t.append(core.make_record(key[0], key[2]))
    return path, keys


def test_a_rewrite_killed_before_its_rename_leaves_the_transcript_as_it_was(tmp_path):
    path, keys = seeded(tmp_path)
    before = path.read_bytes()
    die_before_rename(path)  # it was deleting message 0
    assert path.read_bytes() == before
    problems, _ = core.check_reads(path, keys, torn=0)
    assert problems == []
    assert core.follow_up_append(path, ("after.0", 0, core.KiB)) == []


def test_the_temporary_copy_of_a_killed_rewrite_is_removed_by_the_next_writer(tmp_path):
    # Only a writer may remove it: it holds the write lock, so no live rewrite owns the
    # copy (a reader's open, taking no lock, cannot know that and leaves it).
    path, keys = seeded(tmp_path)
    known = set(os.listdir(tmp_path))
    die_before_rename(path)
    assert len(core.temp_copies(tmp_path)) == 1  # a whole copy of the transcript
    with Transcript.open(path) as t:
        t.append(core.make_record("after.0", core.KiB))
    assert set(os.listdir(tmp_path)) - known == set()
    assert core.scan_file(path).keys == keys + [("after.0", 0, core.KiB)]
