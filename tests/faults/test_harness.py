"""The campaign's judges catch what they are there to catch (so a clean tally means
something): a welded or altered line, a lost or invented record, a rewrite that
dropped an acknowledged append, a projection that is not a prefix."""

import json

import pytest

from boundctx import Transcript

from . import core, kill_writer, paging


@pytest.mark.parametrize("make, records, bad", [
    (lambda a, b: a + b, 2, 0),
    (lambda a, b: a[:-1] + b, 0, 1),  # welded: the first line lost its newline
    (lambda a, b: a.replace(b"w.0/0;", b"w.0/0:", 1) + b, 1, 1),  # one byte altered
    (lambda a, b: a + b[:9], 1, 0),  # a torn tail is no line at all
])
def test_a_welded_or_altered_line_is_not_a_record(tmp_path, make, records, bad):
    path = tmp_path / "t.jsonl"
    path.write_bytes(make(core.line_of(("w.0", 0, core.KiB)), core.line_of(("w.1", 0, core.KiB))))
    scan = core.scan_file(path)
    assert (len(scan.keys), len(scan.bad)) == (records, bad)


def test_a_lost_or_never_attempted_record_is_counted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(core.line_of(("w.0", 0, core.KiB)) + core.line_of(("ghost.0", 0, core.KiB)))
    tally = core.Tally("self-test")
    attempted = {"w.0": ("w.0", 0, core.KiB), "w.1": ("w.1", 0, core.KiB)}
    kill_writer.judge_sequential(tally, path, attempted, ["w.0", "w.1"], {"w.0", "w.1"}, "self-test")
    assert tally.lost == 1 and "w.1 appears 0 times" in " ".join(tally.problems)
    assert "('ghost.0', 0, 1024) was never attempted" in " ".join(tally.problems)


def test_a_rewrite_that_drops_an_acknowledged_append_is_caught(tmp_path):
    log = tmp_path / "acks.log"
    keys = [("s.0", 0, 10), ("a.0", 0, 20)]
    # a.0 was acknowledged, then a delete of s.0 reported a file without a.0 as well.
    stale = {"op": "delete", "target": keys[0], "after": []}
    log.write_text(f"A a.0 0 20\nS {json.dumps(stale)}\n")
    state, problems, appends, rewrites = paging.replay(log, [keys[0]])
    assert (appends, rewrites) == (1, 1) and problems and "a.0" in problems[0]


def test_a_projection_must_be_a_prefix_of_the_record(tmp_path):
    path = tmp_path / "t.jsonl"
    with Transcript.open(path, create=True) as t:
        t.append(core.make_record("w.0", 5000))
        entry = t.window(content_limit=100).messages[0]
    assert entry.truncated and core.check_entry(entry, 100) is None
    forged = dict(entry.record, message={"role": "tool", "content": "w.0/1;" + entry.record["message"]["content"][6:]})
    assert core.check_entry(type(entry)(**{**{f: getattr(entry, f) for f in entry.__struct_fields__},
                                           "record": forged}), 100) is not None
