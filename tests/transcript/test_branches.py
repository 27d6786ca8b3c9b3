"""Transcripts as agents write them: trees with rewinds, parallel calls, compactions and
replayed copies, read along their active branch (or any other), checked against a slow
twin that parses every line (``tests/reference/linetree.py``); and the real sessions in
``../shared/data`` read with every current message kept."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundctx._native import lineindex, linetree
from boundctx.transcript import Transcript
from boundctx.transcript.dialects import classify_by_parse, dialect_kinds, settle_undecided
from boundctx.transcript.layout import Layout, build_layout, extend_layout, id_index_of, native_table
from boundctx.transcript.tree import build_tree, link_keys

from tests._support import SHARED_DATA, rewound_session
from tests.reference import linetree as ref

CLAUDE = SHARED_DATA / "claude-code-sessions"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path / "cache"))


def twin(path) -> tuple[list[int], list[int]]:
    """``(up, kinds)`` of every line of ``path``, by parsing every line."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")[:-1]
    table = dialect_kinds("auto")
    kinds = [classify_by_parse(x, table, at_file_start=i == 0) for i, x in enumerate(lines)]
    up = ref.hang([ref.links_of_line(x, link_keys("auto")) for x in lines])
    return up, kinds


def expected_window(up, kinds, leaf):
    msgs = ref.branch_messages(up, kinds, leaf)
    comps = ref.branch_compactions(up, kinds, leaf)
    if not msgs:
        return msgs, comps[-1:]
    first, last = msgs[0], msgs[-1]
    before = [c for c in comps if c < first][-1:]
    return msgs, before + [c for c in comps if first < c <= last]


# -- generated trees ------------------------------------------------------------------------


def pi_session(rng: random.Random, steps: int) -> list[dict]:
    """A pi session v3 tree: messages on the current leaf, rewinds to an older entry,
    compactions, model changes; every entry names its parent."""
    out = [{"type": "session", "version": 3, "id": "sess", "timestamp": "t", "cwd": "/"}]
    entries: list[str] = []
    leaf = None
    for n in range(steps):
        eid = f"e{n:04x}"
        roll = rng.random()
        if roll < 0.12 and len(entries) > 2:
            leaf = rng.choice(entries[:-1])  # a rewind: the next entry forks here
            continue
        if roll < 0.2:
            out.append({"type": "compaction", "id": eid, "parentId": leaf, "summary": f"up to {n}",
                        "firstKeptEntryId": leaf})
        elif roll < 0.25:
            out.append({"type": "model_change", "id": eid, "parentId": leaf, "modelId": "m"})
        else:
            role = rng.choice(["user", "assistant"])
            text = f"{role} {n} " + "x" * rng.randrange(80)
            out.append({"type": "message", "id": eid, "parentId": leaf,
                        "message": {"role": role, "content": [{"type": "text", "text": text}]}})
        entries.append(eid)
        leaf = eid
    return out


def claude_session(rng: random.Random, steps: int) -> list[dict]:
    """A Claude Code tree: turns, parallel tool calls written as a chain of assistant
    records whose results point back at each call, progress lines, compactions (a
    parentless boundary on logicalParentUuid, then the summary), rewinds, and a second
    compaction that appends copies of earlier rows again."""
    out: list[dict] = []
    n = 0
    leaf = None

    def add(record: dict) -> str:
        nonlocal n, leaf
        n += 1
        record.setdefault("uuid", f"u{n:05d}")
        record.setdefault("parentUuid", leaf)
        record.setdefault("sessionId", "s")
        out.append(record)
        leaf = record["uuid"]
        return leaf

    def message(kind: str, content) -> dict:
        return {"type": kind, "message": {"role": kind, "content": content}}

    for _ in range(steps):
        roll = rng.random()
        if roll < 0.1 and len(out) > 4:
            candidates = [r["uuid"] for r in out if r["type"] == "assistant"]
            if candidates:
                leaf = rng.choice(candidates)  # rewind: a new prompt forks from here
            add(message("user", "again, differently"))
        elif roll < 0.4:
            add(message("user", f"prompt {n}"))
            calls = rng.randrange(1, 4)
            issued = []
            for c in range(calls):
                call = add(message("assistant", [{"type": "tool_use", "id": f"t{n}c{c}", "name": "Read", "input": {}}]))
                issued.append((call, f"t{n}c{c}"))
                for _p in range(rng.randrange(0, 3)):
                    add({"type": "progress", "data": {}, "toolUseID": f"t{n}c{c}"})
            for call, tool_id in issued:
                leaf = call if rng.random() < 0.9 else leaf
                add({**message("user", [{"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}]),
                     "parentUuid": call, "sourceToolAssistantUUID": call})
                for _p in range(rng.randrange(0, 2)):
                    add({"type": "progress", "data": {}, "toolUseID": tool_id})
            add(message("assistant", [{"type": "text", "text": f"done {n}"}]))
        elif roll < 0.5:
            before = leaf
            add({"type": "system", "subtype": "compact_boundary", "parentUuid": None,
                 "logicalParentUuid": before if rng.random() < 0.8 else "gone", "content": "Compacted"})
            add({**message("user", "summary of it all"), "isCompactSummary": True})
        elif roll < 0.55 and len(out) > 3:
            # Replayed copies of earlier rows, as a second compaction writes them.
            for row in rng.sample(out, min(3, len(out))):
                out.append(dict(row))
        else:
            add(message("user", f"prompt {n}"))
            add(message("assistant", [{"type": "text", "text": f"answer {n}"}]))
        if rng.random() < 0.05:
            out.append({"type": "file-history-snapshot", "messageId": leaf, "snapshot": {}})
    return out


def write(path, records, *, cut: int | None = None):
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    path.write_bytes(data if cut is None else data[:cut])
    return data


def check_against_twin(path, t: Transcript) -> None:
    up, kinds = twin(path)
    leaf = ref.active_leaf(up, kinds)
    msgs, comps = expected_window(up, kinds, leaf)
    w = t.window(message_limit=None)  # (a read notices the file grew; the facts are as of the last read)
    assert t.message_count == len(msgs)
    assert t.in_file_order == ref.reads_as_list(kinds, *ref.place(up, kinds)[::2], up)
    assert [m.line for m in w.messages] == msgs
    assert [m.index for m in w.messages] == list(range(len(msgs)))
    assert [c.line for c in w.compactions] == comps
    # Paging back from the newest window gives the same branch, page by page.
    seen: list[int] = []
    before = None
    while True:
        page = t.window(message_before=before, message_limit=7)
        seen = [m.line for m in page.messages] + seen
        if not page.has_more_before:
            break
        before = page.message_start
    assert seen == msgs
    # Every other branch reads by its leaf, and is the twin's path to it.
    listed = t.branches()
    leaves = {b.leaf for b in listed if not b.active}
    assert [b.leaf for b in listed if b.active] == ([leaf] if msgs else [])
    for b in listed:
        other = ref.branch_messages(up, kinds, b.leaf)
        assert [m.line for m in t.window(message_limit=None, leaf=b.leaf).messages] == other
        assert b.message_count == len(other)
    # A branch's leaf is a message no other message follows on its branch.
    followed = {ref.branch_messages(up, kinds, m)[-2] for m in range(len(up))
                if ref.in_sequence(kinds[m]) and up[m] != ref.COPY and len(ref.branch_messages(up, kinds, m)) > 1}
    assert leaves == {m for m in range(len(up)) if ref.in_sequence(kinds[m]) and up[m] != ref.COPY} - followed \
        - set(msgs[-1:])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 60), kind=st.sampled_from(["pi", "claude"]))
def test_a_generated_tree_reads_as_its_twin_built_appended_or_reloaded(tmp_path, seed, steps, kind):
    rng = random.Random(seed)
    records = (pi_session if kind == "pi" else claude_session)(rng, steps)
    path = tmp_path / f"{kind}-{seed}-{steps}.jsonl"
    data = write(path, records)
    # Grown: first part of the file, then the rest appended (the layout is extended).
    cut = data.rfind(b"\n", 0, len(data) // 2) + 1
    path.write_bytes(data[:cut])
    with Transcript.open(path) as t:
        t.window(message_limit=3)
        with open(path, "ab") as f:
            f.write(data[cut:])
        check_against_twin(path, t)
    # Reloaded from the sidecar the first open left.
    with Transcript.open(path) as t:
        assert t.layout_outcome in ("valid", "extend")
        check_against_twin(path, t)
    # Built fresh.
    for side in (path.with_name(path.name + ".layout"),):
        if side.exists():
            side.unlink()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path / f"fresh-{seed}-{steps}-{kind}"))
        with Transcript.open(path) as t:
            assert t.layout_outcome == "built"
            check_against_twin(path, t)


def test_two_compactions_hung_on_one_line_are_a_fork_and_the_first_is_left_off(tmp_path):
    # A compaction on an abandoned branch: lines 5 and 6 are both compactions of m3's
    # branch, and the newest message follows the second. Messages alone would read as a
    # list; the window must still leave the first compaction off (seed 5950 of the
    # generated trees above found it).
    records = [{"type": "message", "id": "m0", "parentId": None, "message": {"role": "user", "content": "a"}},
               {"type": "compaction", "id": "c1", "parentId": "m0", "firstKeptEntryId": "m0", "summary": "s1"},
               *({"type": "message", "id": f"m{k}", "parentId": "c1" if k == 2 else f"m{k - 1}",
                  "message": {"role": "user", "content": str(k)}} for k in (2, 3, 4)),
               {"type": "compaction", "id": "c5", "parentId": "m4", "firstKeptEntryId": "m4", "summary": "s5"},
               {"type": "compaction", "id": "c6", "parentId": "m4", "firstKeptEntryId": "m4", "summary": "s6"},
               {"type": "message", "id": "m7", "parentId": "c6", "message": {"role": "user", "content": "7"}}]
    path = tmp_path / "forked-compactions.jsonl"
    write(path, records)
    with Transcript.open(path) as t:
        assert not t.in_file_order
        w = t.window(message_limit=None)
        assert [m.record["id"] for m in w.messages] == ["m0", "m2", "m3", "m4", "m7"]
        assert [c.record["id"] for c in w.compactions] == ["c1", "c6"]
        check_against_twin(path, t)


def test_a_rewind_leaves_the_abandoned_branch_out_of_the_window_and_in_the_list(tmp_path):
    records = rewound_session()  # m0..m5, then n2, n3 forking after m1
    path = tmp_path / "pi.jsonl"
    write(path, records)
    with Transcript.open(path) as t:
        assert not t.in_file_order
        w = t.window(message_limit=None)
        assert [m.record["id"] for m in w.messages] == ["m0", "m1", "n2", "n3"]
        assert [m.index for m in w.messages] == [0, 1, 2, 3]
        listed = t.branches()
        assert [(b.leaf_id, b.message_count, b.shared, b.active) for b in listed] == [
            ("n3", 4, 4, True), ("m5", 6, 2, False)]
        old = t.window(message_limit=2, leaf="m5")
        assert [m.record["id"] for m in old.messages] == ["m4", "m5"] and old.message_start == 4
        assert [m.record["id"] for m in t.window(message_limit=None, leaf=old.leaf).messages][-1] == "m5"
        with pytest.raises(ValueError, match="no entry"):
            t.window(leaf="nope")
        with pytest.raises(ValueError, match="not a line"):
            t.window(leaf=10**6)


def test_a_branch_window_whose_message_positions_lie_is_read_again_from_the_file(tmp_path):
    """A branch's lines come from a walk of ``up``; their ``pos`` must say the same
    places. A layout whose ``pos`` lies for one line of the window is rebuilt, and the
    window is still the branch."""
    records = rewound_session(old=30, fork_after=20, new=6)
    path = tmp_path / "pi.jsonl"
    write(path, records)
    with Transcript.open(path) as t:
        layout = t._layout
        before = t.window(message_limit=5).messages
        assert [m.record["id"] for m in before] == ["n22", "n23", "n24", "n25", "n26"]
        pos = layout.pos.all().copy()
        pos[before[2].line] += 1
        layout.pos = type(layout.pos)([pos])
        w = t.window(message_limit=5)
        assert t.layout_outcome == "rebuilt"
        assert [m.record["id"] for m in w.messages] == ["n22", "n23", "n24", "n25", "n26"]


def test_replayed_copies_after_a_second_compaction_are_read_once(tmp_path):
    """Claude Code's second /compact appends copies of earlier rows (the same uuids):
    a transcript that grows quadratically for its users. Each is read once."""
    rows = []
    parent = None
    for k in range(8):
        rows.append({"type": "user" if k % 2 == 0 else "assistant", "uuid": f"r{k}", "parentUuid": parent,
                     "message": {"role": "user" if k % 2 == 0 else "assistant", "content": f"turn {k}"}})
        parent = f"r{k}"
    boundary = {"type": "system", "subtype": "compact_boundary", "uuid": "b1", "parentUuid": None,
                "logicalParentUuid": "r7", "content": "Compacted"}
    summary = {"type": "user", "uuid": "s1", "parentUuid": "b1", "isCompactSummary": True,
               "message": {"role": "user", "content": "summary"}}
    replay = [dict(r) for r in rows[4:]]  # the second compaction's copies
    after = {"type": "user", "uuid": "r8", "parentUuid": "s1", "message": {"role": "user", "content": "turn 8"}}
    path = tmp_path / "cc.jsonl"
    write(path, rows + [boundary, summary] + replay + [after])
    with Transcript.open(path) as t:
        w = t.window(message_limit=None)
        ids = [m.record["uuid"] for m in w.messages]
        assert ids == [f"r{k}" for k in range(8)] + ["s1", "r8"]
        assert len(ids) == len(set(ids))
        assert [c.record["uuid"] for c in w.compactions] == ["b1"]
        assert not t.in_file_order  # the copies are in the file, and not read
    up, kinds = twin(path)
    assert ref.branch_messages(up, kinds, ref.active_leaf(up, kinds)) == [m.line for m in w.messages]


# -- the real sessions ------------------------------------------------------------------------


def _needs(path):
    if not path.exists():
        pytest.skip(f"{path} is not here: ../shared/data holds the real sessions")


def test_a_real_claude_code_session_keeps_its_fan_outs_and_its_compaction_chain():
    """ae4a77f8: 657 user and assistant lines; a walk from the newest entry up its
    parentUuid chain reaches only 648 of them. The 9 others are results of parallel tool
    calls (lines 17, 98, 124, 1773, 1920, 2097, 2172, 2300 answer a call whose chain went
    on through the next call; line 1762 is the next call of one such fan-out, and 1773 its
    result). The compaction boundary (line 1480) has a null parentUuid and hangs on its
    logicalParentUuid (line 1478). Every one of the 657 is on the branch, in file order."""
    path = CLAUDE / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
    _needs(path)
    with Transcript.open(path) as t:
        w = t.window(message_limit=None)
        lines = [m.line for m in w.messages]
        with open(path, "rb") as f:
            file_messages = [i for i, line in enumerate(f) if json.loads(line).get("type") in ("user", "assistant")]
        assert lines == file_messages and len(lines) == 657
        for fan_out in (17, 98, 124, 1762, 1773, 1920, 2097, 2172, 2300):
            assert fan_out in lines
        assert [c.line for c in w.compactions] == [1480]
        assert t.in_file_order and len(t.branches()) == 1


def test_a_real_session_whose_compaction_names_a_parent_it_lacks_keeps_what_came_before():
    """4d5611e5: the boundary at line 753 names a logicalParentUuid no line has; it hangs
    on the line before it, so the 191 messages before the compaction stay on the branch
    (a walk up parentUuid alone stops at the boundary with 216 of the 408: the 191 and
    one fan-out result after it are lost)."""
    path = CLAUDE / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    _needs(path)
    with Transcript.open(path) as t:
        assert t.message_count == 408
        w = t.window(message_limit=None)
        assert [c.line for c in w.compactions] == [753]
        assert sum(1 for m in w.messages if m.line < 753) == 191
    up, kinds = twin(path)
    assert ref.branch_messages(up, kinds, ref.active_leaf(up, kinds)) == [m.line for m in w.messages]


@pytest.mark.parametrize("name", ["claude-code-sessions/turn-2.jsonl", "pi-sessions/before-compaction.jsonl",
                                  "pi-sessions/large-session.jsonl"])
def test_real_files_without_forks_read_as_the_list_they_are(name):
    path = SHARED_DATA / name
    _needs(path)
    up, kinds = twin(path)
    with Transcript.open(path) as t:
        assert t.in_file_order
        assert [m.line for m in t.window(message_limit=None).messages] == \
            ref.branch_messages(up, kinds, ref.active_leaf(up, kinds))


def test_a_reply_saved_to_a_rewound_session_goes_on_from_its_newest_entry(tmp_path):
    """boundctx's own reply follows the branch it read: after the newest message, or after
    a compaction written after it, which then stays on the branch."""
    from boundctx.transcript.chat import append_exchange, chat_messages

    records = [{"type": "session", "version": 3, "id": "s"},
               {"type": "message", "id": "a", "parentId": None, "message": {"role": "user", "content": "q1"}},
               {"type": "message", "id": "b", "parentId": "a", "message": {"role": "assistant", "content": "x1"}},
               {"type": "message", "id": "c", "parentId": "a", "message": {"role": "assistant", "content": "x2"}},
               {"type": "compaction", "id": "k", "parentId": "c", "summary": "so far", "firstKeptEntryId": "c"}]
    path = tmp_path / "pi.jsonl"
    write(path, records)
    with Transcript.open(path) as t:
        conversation = chat_messages(t.window(message_limit=None))
        assert conversation.last_id == "k"
        append_exchange(t, "q2", "x3", style="parts", parent_id=conversation.last_id)
        w = t.window(message_limit=None)
        assert [m.record["id"] for m in w.messages][:2] == ["a", "c"]
        assert [m.record["message"]["content"][0]["text"] for m in w.messages[2:]] == ["q2", "x3"]
        assert [c.record["id"] for c in w.compactions] == ["k"]


def test_a_leaf_of_digits_is_an_entry_id_when_an_entry_has_it_else_a_line(tmp_path):
    """pi's ids can be all digits ("00000010"): as given on a command line or in a query,
    the text names that entry; digits no entry has are a line number."""
    records = [{"type": "message", "id": f"{k + 100:08d}", "parentId": f"{k + 99:08d}" if k else None,
                "message": {"role": "user", "content": f"turn {k}"}} for k in range(12)]
    records.append({"type": "message", "id": "late", "parentId": "00000103",
                    "message": {"role": "user", "content": "rewound"}})
    path = tmp_path / "digits.jsonl"
    write(path, records)
    with Transcript.open(path) as t:
        by_id = t.window(message_limit=None, leaf="00000110").messages
        assert by_id[-1].record["id"] == "00000110" and len(by_id) == 11
        by_line = t.window(message_limit=None, leaf="5").messages
        assert by_line[-1].line == 5 and by_line[-1].record["id"] == "00000105"
        with pytest.raises(ValueError, match="leaf=99 is not a line"):
            t.window(leaf="99")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 20), pad=st.sampled_from([100, (1 << 20) + 10]))
def test_links_read_in_the_scan_make_the_tree_a_second_read_makes(tmp_path, seed, steps, pad):
    # Some records carry their "type" past the classify window (a pad first): the scan
    # leaves them undecided and a parse settles them. Links do not depend on kinds, so
    # the tree from the scan's links is the one read_links' second read of the file gives.
    rng = random.Random(seed)
    records = [{"pad": "p" * pad, **r} if rng.random() < 0.3 else r for r in pi_session(rng, steps)]
    path = tmp_path / "padded.jsonl"
    data = write(path, records)
    fd = os.open(path, os.O_RDONLY)
    try:
        layout = build_layout(fd, dialect="auto")
        res = lineindex.scan_bytes(data, native_table("auto"))
        kinds = settle_undecided(fd, res, "auto")
        again = build_tree(fd, res.starts, res.indexed_end, kinds, "auto")  # links read again
    finally:
        os.close(fd)
    assert bytes(layout.kinds.all().astype("u1")) == kinds
    assert layout.reads_as_chain == again.chain
    for name in ("ids", "up") if again.chain else ("ids", "up", "pos", "tip", "comp"):
        assert getattr(layout, name).all().astype("i8").tobytes() == getattr(again, name), name
    if again.chain:
        # A chain's places are worked out when read, never made (decision 0053): they
        # are the ones the twin places.
        up = np.frombuffer(again.up, dtype=np.int64).tolist()
        assert up == list(range(-1, len(up) - 1))
        for name, want in zip(("pos", "tip", "comp"), ref.place(up, list(kinds))):
            assert getattr(layout, name).all().tolist() == want, name
    assert layout.kinds.all().tolist().count(lineindex.UNDECIDED) == 0
    assert res.kinds.count(lineindex.UNDECIDED) == (pad > 100) * sum("pad" in r for r in records)
    with Transcript.open(path) as t:
        check_against_twin(path, t)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 30), parts=st.integers(1, 4))
def test_a_build_sorts_its_ids_when_an_append_first_needs_them_into_the_runs_it_would_have(
        tmp_path, seed, steps, parts):
    # A build leaves its runs' ids unsorted (only an append reads the index); sorted
    # later, in order, they are the runs a build that sorted them at once would hold.
    rng = random.Random(seed)
    path = tmp_path / "grown.jsonl"
    data = write(path, pi_session(rng, steps))
    cuts = sorted({data.rfind(b"\n", 0, len(data) * k // parts) + 1 for k in range(1, parts)} - {0})
    path.write_bytes(data[:cuts[0]] if cuts else data)
    fd = os.open(path, os.O_RDWR)
    try:
        layout = build_layout(fd, dialect="auto")
        for cut, nxt in zip(cuts, [*cuts[1:], len(data)]):
            os.pwrite(fd, data[cut:nxt], cut)
            extend_layout(layout, fd)
        # Each append sorted the runs before it; the last scan's run is left unsorted.
        bounds = [0, *[int(layout.starts.bisect_right(c - 1)) for c in cuts], layout.line_count]
        runs = [lo for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
        assert [line0 for line0, _, _ in layout.unsorted_ids] == runs[-1:]
        layout.sort_ids()
        assert not layout.unsorted_ids
        # The runs an eager build makes: each scan's run sorted as it came, small ones merged.
        eager = Layout(dialect="auto", classify_window=layout.classify_window, identity=layout.identity)
        for lo, hi in zip(bounds, bounds[1:]):
            if hi > lo:
                eager._index_ids(*id_index_of(layout.ids.slice(lo, hi), layout.up.slice(lo, hi), lo))
        assert len(layout.id_index) == len(eager.id_index)
        for (k1, l1), (k2, l2) in zip(layout.id_index, eager.id_index):
            assert k1.tolist() == k2.tolist() and l1.tolist() == l2.tolist()
        # And an append's lookups through them find each id's first line.
        ids = layout.ids.all()
        wanted = sorted({int(i) for i in ids if i})
        keys, lines = layout.lines_of_ids(np.array(wanted, dtype="i8"))
        first = {}
        for line, i in enumerate(ids.tolist()):
            if i and layout.up[line] != linetree.COPY:
                first.setdefault(i, line)
        assert dict(zip(keys.tolist(), lines.tolist())) == first
    finally:
        os.close(fd)
