"""Full-history rewrites: atomic, from a complete history only, never from a window."""

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx import PartialHistoryRewrite, Transcript, TranscriptChanged
from boundctx.transcript import RawLine, encode_record
from boundctx.transcript.layout import sidecar_paths


def make(path, n):
    lines = [encode_record({"type": "session", "version": 3, "id": "s"})]
    lines += [encode_record({"type": "message", "id": f"m{i}", "message": {"role": "user", "content": f"t{i}"}})
              for i in range(n)]
    path.write_bytes(b"".join(lines))
    return path


def ids(t):
    return [m.record["id"] for m in t.window().messages]


def test_edit_delete_truncate_rehydrate_the_whole_history(tmp_path):
    path = make(tmp_path / "t.jsonl", 10)
    with Transcript.open(path) as t:
        t.window(preset="renderer", message_limit=3)  # a partial view first, as a UI would
        t.edit(8, {"type": "message", "id": "edited"})
        t.delete(2)
        assert ids(t) == ["m0", "m1", "m3", "m4", "m5", "m6", "m7", "edited", "m9"]
        t.truncate(7)
        assert ids(t) == ["m0", "m1", "m3", "m4", "m5", "m6", "m7"]
        assert t.read_lines(0, 1)[0].type == "session"  # other lines survive
    with Transcript.open(path) as t:
        assert ids(t) == ["m0", "m1", "m3", "m4", "m5", "m6", "m7"]


def test_rewrite_from_a_window_or_a_list_is_refused(tmp_path):
    path = make(tmp_path / "t.jsonl", 10)
    before = path.read_bytes()
    with Transcript.open(path) as t:
        w = t.window(message_limit=3)
        for partial in (w, w.messages, [m.record for m in w.messages]):
            with pytest.raises(PartialHistoryRewrite, match="complete history"):
                t.rewrite(partial)
    assert path.read_bytes() == before


def test_history_from_another_transcript_object_is_refused(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    with Transcript.open(path) as a, Transcript.open(path) as b:
        h = a.history()
        with pytest.raises(PartialHistoryRewrite):
            b.rewrite(h)


def test_stale_history_is_refused(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    with Transcript.open(path) as t:
        h = t.history()
        t.append({"type": "message", "id": "late"})
        h.delete_message(0)
        with pytest.raises(TranscriptChanged, match="history"):
            t.rewrite(h)
        assert ids(t) == ["m0", "m1", "m2", "late"]


def test_rewrite_replaces_atomically_and_invalidates_both_cache_layers(tmp_path):
    path = make(tmp_path / "t.jsonl", 5)
    with Transcript.open(path) as reader:
        assert reader.message_count == 5
        with Transcript.open(path) as t:
            ino = os.stat(path).st_ino
            t.delete(0)
            assert os.stat(path).st_ino != ino  # a new file took the old one's place
            assert t.layout_outcome == "rebuilt"
        # the other reader follows the path to the new file
        assert ids(reader) == ["m1", "m2", "m3", "m4"]
    leftovers = [p for p in os.listdir(tmp_path) if p.startswith(".rewrite-")]
    assert leftovers == []
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid" and t.message_count == 4
    assert os.path.exists(sidecar_paths(str(path))[0])


def test_rewrite_keeps_corrupt_and_blank_lines_byte_for_byte(tmp_path):
    path = tmp_path / "t.jsonl"
    bad = b'{"type":"message","id":"x", oops}\n'
    path.write_bytes(encode_record({"type": "message", "id": "a"}) + bad + b"\n"
                     + encode_record({"type": "message", "id": "b"}))
    with Transcript.open(path) as t:
        h = t.history()
        assert isinstance(h.message(1), RawLine)
        t.edit(2, {"type": "message", "id": "b2"})
    assert path.read_bytes() == (encode_record({"type": "message", "id": "a"}) + bad + b"\n"
                                 + encode_record({"type": "message", "id": "b2"}))


def test_history_with_a_torn_tail_is_refused_until_it_is_resolved(tmp_path):
    path = make(tmp_path / "t.jsonl", 2)
    with open(path, "ab") as f:
        f.write(b'{"type":"mess')
    with Transcript.open(path) as t:
        with pytest.raises(TranscriptChanged, match="unfinished write"):
            t.history()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**32 - 1))
def test_no_sequence_of_window_and_edit_calls_deletes_older_messages(tmp_path_factory, n, seed):
    rng = random.Random(seed)
    path = make(tmp_path_factory.mktemp("w") / "t.jsonl", n)
    expected = [f"m{i}" for i in range(n)]
    with Transcript.open(path) as t:
        for step in range(6):
            limit = rng.randint(1, n)
            before = rng.randint(0, n)
            w = t.window(message_before=before, message_limit=limit,
                         content_limit=rng.choice([None, 0, 3, 100]))
            if not w.messages:
                continue
            target = rng.choice(w.messages)
            t.edit(target.index, {"type": "message", "id": f"e{step}"})
            expected[target.index] = f"e{step}"
            # an edit from a projected window still writes the edit, not the projection
            assert ids(t) == expected
            with pytest.raises(PartialHistoryRewrite):
                t.rewrite(w)
        assert t.message_count == n


def test_history_from_a_lying_sidecar_is_read_after_one_rebuild(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(encode_record({"type": "message", "id": f"m{i}", "pad": "x" * (i % 5)})
                              for i in range(600)))
    Transcript.open(path).close()
    st = os.stat(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[151], lines[303] = lines[303], lines[151]  # different lengths, same total size
    path.write_bytes(b"".join(lines))  # in place: same inode, size, head and tail
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
        h = t.history()
        assert t.layout_outcome == "rebuilt"
        assert h.message(151)["id"] == "m303" and h.message(303)["id"] == "m151"
