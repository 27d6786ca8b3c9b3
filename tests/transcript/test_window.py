"""Bounded windows: counts, paging, display projection, compactions, dialects."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boundctx import Transcript
from boundctx._native import lineindex as li
from boundctx.transcript import RENDERER_PRESET, encode_record

from tests._support import write_lines


def plain_parse(path):
    """The obviously-correct reading: json.loads of every line."""
    out = []
    with open(path, "rb") as f:
        for line in f:
            out.append(json.loads(line))
    return out


def make(path, n, *, compaction_at=(), text=lambda i: f"message {i}"):
    lines = [encode_record({"type": "session", "version": 3, "id": "s"})]
    for i in range(n):
        if i in compaction_at:
            lines.append(encode_record({"type": "compaction", "id": f"c{i}", "summary": f"before {i}"}))
        lines.append(encode_record({"type": "message", "id": f"m{i}",
                                    "message": {"role": "user", "content": text(i)}}))
    path.write_bytes(b"".join(lines))
    return path


@pytest.mark.parametrize("name", ["before-compaction.jsonl", "large-session.jsonl"])
def test_real_pi_session_counts_equal_a_plain_full_parse(pi_session, name):
    path = pi_session(name)
    records = plain_parse(path)
    with Transcript.open(path) as t:
        assert t.message_count == sum(r["type"] == "message" for r in records)
        assert t.compaction_count == sum(r["type"] == "compaction" for r in records)
        assert t.line_count == len(records)


@pytest.mark.parametrize("name", ["before-compaction.jsonl", "large-session.jsonl"])
def test_real_pi_session_pages_back_to_message_zero_with_no_gaps_or_repeats(pi_session, name):
    path = pi_session(name)
    expected = [r for r in plain_parse(path) if r["type"] == "message"]
    seen = []
    with Transcript.open(path) as t:
        before = None
        while True:
            w = t.window(message_before=before, message_limit=37)
            assert [m.index for m in w.messages] == list(range(w.message_start, w.message_start + len(w.messages)))
            seen[:0] = w.messages
            if not w.has_more_before:
                break
            before = w.message_start
    assert [m.record for m in seen] == expected
    assert [m.index for m in seen] == list(range(len(expected)))


def test_real_pi_session_renderer_window_bounds_every_message(pi_session):
    path = pi_session("before-compaction.jsonl")
    with Transcript.open(path) as t:
        w = t.window(preset="renderer")
        assert len(w.messages) == RENDERER_PRESET["message_limit"]
        assert w.message_start == t.message_count - 100 and w.has_more_before
        for m in w.messages:
            assert len(json.dumps(m.record, ensure_ascii=False).encode()) <= 65536 + 65536 + 400
        # the file holds one compaction before the window: it bounds the window
        assert [c.record["type"] for c in w.compactions] == ["compaction"]


def test_window_defaults_are_uncapped_whole_records(tmp_path):
    big = "x" * 300_000
    path = make(tmp_path / "t.jsonl", 3, text=lambda i: big if i == 1 else "small")
    with Transcript.open(path) as t:
        w = t.window()
        assert w.message_start == 0 and not w.has_more_before and w.message_count == 3
        assert w.messages[1].record["message"]["content"] == big
        assert not any(m.truncated for m in w.messages)


def test_content_limit_projects_long_messages_with_an_explicit_marker(tmp_path):
    big = "é" * 200_000  # 400,000 bytes of two-byte characters
    path = make(tmp_path / "t.jsonl", 2, text=lambda i: big if i == 0 else "short")
    with Transcript.open(path) as t:
        w = t.window(content_limit=1000)
        cut, short = w.messages
        text = cut.record["message"]["content"]
        assert cut.truncated and cut.cut_bytes > 390_000
        kept, marker = text.split(" [... ")
        assert set(kept) == {"é"} and len(kept.encode()) <= 1000
        assert marker == f"{cut.cut_bytes} more bytes not shown]"
        assert cut.record["message"]["role"] == "user" and cut.record["id"] == "m0"
        assert not short.truncated and short.record["message"]["content"] == "short"
        # the model path still gets every byte
        assert t.window(message_limit=2).messages[0].record["message"]["content"] == big


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 60), limit=st.integers(1, 25), data=st.data())
def test_paging_backwards_covers_every_message_once(tmp_path_factory, n, limit, data):
    path = make(tmp_path_factory.mktemp("p") / "t.jsonl", n,
                compaction_at=set(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=4))))
    with Transcript.open(path) as t:
        start = data.draw(st.integers(0, n))
        got = []
        w = t.window(message_before=start, message_limit=limit)
        got[:0] = [m.index for m in w.messages]
        while w.has_more_before:
            w = t.window(message_before=w.message_start, message_limit=limit)
            assert 0 < len(w.messages) <= limit
            got[:0] = [m.index for m in w.messages]
        assert got == list(range(start))
        assert [m.record["id"] for m in t.window(message_before=start).messages] == [f"m{i}" for i in range(start)]


def test_window_compactions_are_the_one_in_force_and_those_inside(tmp_path):
    path = make(tmp_path / "t.jsonl", 30, compaction_at={5, 12, 25})
    with Transcript.open(path) as t:
        assert t.compaction_count == 3
        ids = lambda w: [c.record["id"] for c in w.compactions]  # noqa: E731
        assert ids(t.window(message_before=20, message_limit=5)) == ["c12"]
        assert ids(t.window(message_before=14, message_limit=5)) == ["c5", "c12"]
        assert ids(t.window(message_before=4, message_limit=4)) == []
        assert ids(t.window()) == ["c5", "c12", "c25"]


@pytest.mark.parametrize("kwargs, error", [
    ({"message_before": -1}, ValueError),
    ({"message_before": 99}, ValueError),
    ({"message_limit": -5}, ValueError),
    ({"content_limit": -1}, ValueError),
    ({"message_limit": 2.5}, TypeError),
    ({"message_limit": True}, TypeError),
    ({"preset": "phone"}, ValueError),
])
def test_window_rejects_bad_arguments_with_a_clear_error(tmp_path, kwargs, error):
    path = make(tmp_path / "t.jsonl", 3)
    with Transcript.open(path) as t, pytest.raises(error) as exc:
        t.window(**kwargs)
    assert any(word in str(exc.value) for word in ("must be", "past the last", "preset"))


def test_window_on_a_closed_transcript_is_an_error(tmp_path):
    t = Transcript.open(make(tmp_path / "t.jsonl", 1))
    t.close()
    with pytest.raises(ValueError, match="closed"):
        t.window()


def test_message_limit_zero_is_an_empty_window_that_still_reports_position(tmp_path):
    with Transcript.open(make(tmp_path / "t.jsonl", 5)) as t:
        w = t.window(message_limit=0)
        assert w.messages == [] and w.message_start == 5 and w.has_more_before


def test_read_lines_returns_other_kinds_too(tmp_path):
    with Transcript.open(make(tmp_path / "t.jsonl", 2)) as t:
        lines = t.read_lines(0, 10)
        assert [e.type for e in lines] == ["session", "message", "message"]
        assert [e.index for e in lines] == [None, None, None]


def test_claude_code_lines_are_read_through_the_dialect_table(tmp_path):
    path = write_lines(tmp_path / "claude.jsonl", [
        '{"type":"summary","summary":"Fixing the build","leafUuid":"u2"}',
        '{"parentUuid":null,"isSidechain":false,"userType":"external","cwd":"/p","sessionId":"s",'
        '"version":"1.0.0","type":"user","message":{"role":"user","content":"hi"},"uuid":"u1",'
        '"timestamp":"2025-06-01T00:00:00Z"}',
        '{"parentUuid":"u1","isSidechain":false,"message":{"role":"assistant","content":[{"type":'
        '"text","text":"hello"}]},"type":"assistant","uuid":"u2","timestamp":"2025-06-01T00:00:01Z"}',
        '{"type":"system","subtype":"compact_boundary","content":"Conversation compacted"}',
    ])
    with Transcript.open(path, dialect="claude-code") as t:
        assert (t.message_count, t.compaction_count) == (2, 1)
        w = t.window()
        assert [m.record["uuid"] for m in w.messages] == ["u1", "u2"]
        # The compaction is the compact_boundary line; the "summary" line titles the session.
        assert t.kinds().tolist() == [li.OTHER, li.MESSAGE, li.MESSAGE, li.COMPACTION]
    with Transcript.open(path) as t:  # auto reads it the same way
        assert (t.message_count, t.compaction_count) == (2, 1)


def test_codex_rollout_lines_are_read_through_the_dialect_table(tmp_path):
    path = write_lines(tmp_path / "rollout.jsonl", [
        '{"timestamp":"2025-09-01T00:00:00Z","type":"session_meta","payload":{"id":"r1","cwd":"/p"}}',
        '{"timestamp":"2025-09-01T00:00:01Z","type":"response_item","payload":{"type":"message",'
        '"role":"user","content":[{"type":"input_text","text":"run the tests"}]}}',
        '{"timestamp":"2025-09-01T00:00:02Z","type":"event_msg","payload":{"type":"token_count"}}',
        '{"timestamp":"2025-09-01T00:00:03Z","type":"response_item","payload":{"type":"function_call",'
        '"name":"shell","arguments":"{\\"cmd\\":[\\"pytest\\"]}","call_id":"c1"}}',
        '{"timestamp":"2025-09-01T00:00:04Z","type":"compacted","payload":{"message":"summary"}}',
    ])
    with Transcript.open(path, dialect="codex") as t:
        assert (t.message_count, t.compaction_count) == (2, 1)
        assert t.window().messages[1].record["payload"]["name"] == "shell"


def test_unknown_dialect_is_refused_before_opening(tmp_path):
    with pytest.raises(ValueError, match="unknown transcript dialect 'klingon'"):
        Transcript.open(tmp_path / "missing.jsonl", dialect="klingon")


def test_type_key_past_the_classify_window_is_decided_by_a_full_parse(tmp_path):
    pad = "p" * 500
    path = write_lines(tmp_path / "t.jsonl", [
        f'{{"pad":"{pad}","type":"message","message":{{"role":"user","content":"late type"}}}}',
        f'{{"pad":"{pad}","type":"compaction","summary":"s"}}',
        f'{{"pad":"{pad}","type":"message",broken}}',
    ])
    with Transcript.open(path, classify_window=64) as t:
        assert (t.message_count, t.compaction_count) == (2, 1)
        w = t.window()
        assert w.messages[0].record["message"]["content"] == "late type"
        assert w.messages[1].corrupt is not None


# -- the renderer preset reads the transcript.window_* settings ---------------------


def kept_bytes(entry):
    """Bytes of text a projected message still shows, before its marker."""
    return len(entry.record["message"]["content"].split(" [... ")[0].encode())


def test_renderer_preset_defaults_are_100_messages_of_64_kib(tmp_path):
    assert RENDERER_PRESET == {"message_limit": 100, "content_limit": 65_536, "page_bytes": 1 << 20}
    sizes = {118: 60_000, 119: 80_000}  # bytes of text: one under the budget, one over
    path = make(tmp_path / "t.jsonl", 120, text=lambda i: "é" * (sizes[i] // 2) if i in sizes else f"m {i}")
    with Transcript.open(path) as t:
        w = t.window(preset="renderer")
    assert len(w.messages) == 100 and w.message_start == 20
    under, over = w.messages[-2:]
    assert not under.truncated and kept_bytes(under) == 60_000
    assert over.truncated and 60_000 < kept_bytes(over) <= 65_536


def test_renderer_preset_keeps_a_limit_given_as_none_uncapped(tmp_path):
    # None is a real value (uncapped); only a limit not given comes from the preset.
    path = make(tmp_path / "t.jsonl", 120, text=lambda i: "é" * 40_000 if i == 119 else f"m {i}")
    with Transcript.open(path) as t:
        whole = t.window(preset="renderer", content_limit=None)
        every = t.window(preset="renderer", message_limit=None)
    assert len(whole.messages) == 100 and whole.content_limit is None
    assert not whole.messages[-1].truncated and kept_bytes(whole.messages[-1]) == 80_000
    assert len(every.messages) == 120 and every.content_limit == 65_536
    assert every.messages[-1].truncated


def test_window_options_are_keyword_only(tmp_path):
    path = make(tmp_path / "t.jsonl", 3)
    with Transcript.open(path) as t, pytest.raises(TypeError):
        t.window(None, 2)


def test_renderer_preset_takes_its_message_limit_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BOUNDCTX_TRANSCRIPT_WINDOW_MESSAGES", "7")
    path = make(tmp_path / "t.jsonl", 20)
    with Transcript.open(path) as t:
        w = t.window(preset="renderer")
        assert [m.index for m in w.messages] == list(range(13, 20)) and w.has_more_before
        assert len(t.window(message_before=w.message_start, preset="renderer").messages) == 7
        assert len(t.window(preset="renderer", message_limit=3).messages) == 3  # an argument wins
        assert len(t.window().messages) == 20  # no preset: uncapped, settings or not


def test_renderer_preset_takes_its_limits_from_the_config_file(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text("[transcript]\nwindow_messages = 5\nwindow_content_bytes = 100\n")
    monkeypatch.setenv("BOUNDCTX_CONFIG", str(config))
    path = make(tmp_path / "t.jsonl", 9, text=lambda i: "x" * 1000)
    with Transcript.open(path) as t:
        w = t.window(preset="renderer")
    assert [m.index for m in w.messages] == [4, 5, 6, 7, 8]
    assert all(m.truncated and kept_bytes(m) <= 100 for m in w.messages)


def test_renderer_preset_reads_a_settings_argument_over_the_resolved_settings(tmp_path, monkeypatch):
    from boundctx import config

    monkeypatch.setenv("BOUNDCTX_TRANSCRIPT_WINDOW_MESSAGES", "7")
    path = make(tmp_path / "t.jsonl", 20)
    with Transcript.open(path) as t:
        assert len(t.window(preset="renderer", settings={"transcript.window_messages": 4}).messages) == 4
        resolved = config.load(env={})  # resolved Settings are used as they are: no environment here
        assert len(t.window(preset="renderer", settings=resolved).messages) == 20
        with pytest.raises(TypeError, match="preset"):
            t.window(settings={"transcript.window_messages": 4})


@pytest.mark.parametrize("value, problem", [("0", "too small"), ("1001", "too large"), ("lots", "is not an int")])
def test_an_invalid_window_setting_is_a_clear_config_error(tmp_path, monkeypatch, value, problem):
    from boundctx.errors import ConfigError

    with Transcript.open(make(tmp_path / "t.jsonl", 3)) as t:
        monkeypatch.setenv("BOUNDCTX_TRANSCRIPT_WINDOW_MESSAGES", value)
        with pytest.raises(ConfigError, match=problem) as exc:
            t.window(preset="renderer")
        assert "BOUNDCTX_TRANSCRIPT_WINDOW_MESSAGES" in str(exc.value) and "accepted 1–1,000" in str(exc.value)
        # Every limit given: the settings are not needed, so not read.
        assert len(t.window(preset="renderer", message_limit=2, content_limit=10, page_bytes=None).messages) == 2
        monkeypatch.delenv("BOUNDCTX_TRANSCRIPT_WINDOW_MESSAGES")
        with pytest.raises(ConfigError, match="window_content_bytes = -1"):
            t.window(preset="renderer", message_limit=2, settings={"transcript.window_content_bytes": -1})
