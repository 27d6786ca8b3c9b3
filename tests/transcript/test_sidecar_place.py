"""Where a layout sidecar goes (decision 0039): beside boundctx's own transcripts, in the
cache for every other tool's session files, which never get a boundctx file beside them;
a sidecar is read from either place."""

import json
import os
import shutil

import pytest

from boundctx import Transcript
from boundctx.transcript import encode_record, reindex
from boundctx.transcript import layout as layout_mod
from boundctx.transcript.dialects import BOUNDCTX
from boundctx.transcript.sidecar import OWN_TYPES, beside_allowed, sidecar_paths


def lines(*records):
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)


def claude_code(n):
    out = [{"type": "summary", "summary": "A chat", "leafUuid": "u0"}]
    for i in range(n):
        out.append({"parentUuid": f"a{i - 1}" if i else None, "isSidechain": False, "type": "user",
                    "message": {"role": "user", "content": f"question {i}"}, "uuid": f"u{i}"})
        out.append({"parentUuid": f"u{i}", "isSidechain": False, "type": "assistant",
                    "message": {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]},
                    "uuid": f"a{i}"})
    return lines(*out)


def codex(n):
    out = [{"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "x", "cwd": "/w"}}]
    for i in range(n):
        out.append({"timestamp": "2026-01-01T00:00:01Z", "type": "response_item",
                    "payload": {"type": "message", "role": "user",
                                "content": [{"type": "input_text", "text": f"question {i}"}]}})
    return lines(*out)


def pi(n):
    return lines({"type": "session", "version": 3, "id": "p", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/w"},
                 *({"type": "message", "id": f"m{i}", "parentId": None,
                    "message": {"role": "user", "content": f"question {i}"}} for i in range(n)))


# Other tools' session folders, as they lay them out under the home folder.
FOREIGN = {
    "claude-code": (".claude/projects/-home-me-work/0b6c0d1e.jsonl", claude_code),
    "codex": (".codex/sessions/2026/01/01/rollout-2026-01-01T00-00-00-x.jsonl", codex),
    "pi": (".pi/agent/sessions/--home-me-work--/2026-01-01_x.jsonl", pi),
}


@pytest.fixture(params=sorted(FOREIGN))
def foreign(request, tmp_path):
    name, build = FOREIGN[request.param]
    path = tmp_path / name
    path.parent.mkdir(parents=True)
    path.write_bytes(build(6))
    return path, build


def beside(path):
    return sidecar_paths(str(path))[0]


def cached(path):
    return sidecar_paths(str(path))[1]


def test_another_tools_session_file_gets_no_file_beside_it(foreign):
    path, _ = foreign
    with Transcript.open(path) as t:
        assert t.layout_outcome == "built"
        count = t.message_count
        t.window(preset="renderer")
    assert os.listdir(path.parent) == [path.name]
    assert os.path.isfile(cached(path))
    assert count > 0


def test_its_sidecar_is_reused_from_the_cache_on_the_next_open_without_a_scan(foreign, monkeypatch):
    path, _ = foreign
    with Transcript.open(path) as t:
        count = t.message_count
    calls = []
    scan = layout_mod.filescan.scan_fd
    monkeypatch.setattr(layout_mod.filescan, "scan_fd", lambda *a, **k: calls.append(1) or scan(*a, **k))
    with Transcript.open(path) as t:
        assert (t.layout_outcome, t.message_count) == ("valid", count)
        t.window(preset="renderer")
    assert calls == []
    assert os.listdir(path.parent) == [path.name]


def test_its_sidecar_in_the_cache_is_extended_when_the_tool_appends(foreign):
    path, build = foreign
    Transcript.open(path).close()
    size = os.path.getsize(cached(path))
    path.write_bytes(build(9))  # the tool's file grew (same beginning, more lines)
    with Transcript.open(path) as t:
        assert t.layout_outcome == "extend"
    assert os.path.getsize(cached(path)) > size
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"
    assert os.listdir(path.parent) == [path.name]


def test_reindex_of_another_tools_file_writes_to_the_cache(foreign):
    path, _ = foreign
    report = reindex(path)
    assert report.ok and report.sidecar == cached(path)
    assert os.listdir(path.parent) == [path.name]
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"


def test_a_sidecar_left_beside_another_tools_file_is_still_read(foreign):
    # as earlier versions wrote it: beside the transcript
    path, _ = foreign
    Transcript.open(path).close()
    shutil.move(cached(path), beside(path))
    with Transcript.open(path) as t:
        assert t.layout_outcome == "valid"


def test_without_a_writable_cache_another_tools_file_still_gets_nothing_beside_it(foreign, tmp_path, monkeypatch):
    path, _ = foreign
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(blocker / "layouts"))  # cannot be made, even by root
    for outcome in ("built", "built"):  # no place to keep it: each open scans (bounded, as before)
        with Transcript.open(path) as t:
            assert t.layout_outcome == outcome and t.message_count > 0
    assert os.listdir(path.parent) == [path.name]


def test_a_boundctx_session_keeps_its_sidecar_beside_it(tmp_path):
    path = tmp_path / "notes.jsonl"
    with Transcript.open(path, create=True) as t:
        for n in range(4):
            t.append({"type": "message", "message": {"role": "user", "content": f"question {n}"}})
    assert os.path.isfile(beside(path)) and not os.path.exists(cached(path))
    with Transcript.open(path) as t:
        assert (t.layout_outcome, t.message_count) == ("valid", 4)


def test_a_file_of_boundctx_lines_keeps_its_sidecar_beside_it_and_falls_back_to_the_cache(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode_record({"type": "message", "message": {"role": "user", "content": "hi"}}))
    Transcript.open(path).close()
    assert os.path.isfile(beside(path)) and not os.path.exists(cached(path))
    os.unlink(beside(path))
    os.mkdir(beside(path))  # the place beside cannot take a file: the cache does
    with Transcript.open(path) as t:
        assert t.layout_outcome == "built"
    assert os.path.isfile(cached(path))


@pytest.mark.parametrize("dialect", ["claude-code", "codex", "pi"])
def test_a_file_opened_as_another_tools_dialect_gets_its_sidecar_in_the_cache(tmp_path, dialect):
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode_record({"type": "message", "message": {"role": "user", "content": "hi"}}))
    Transcript.open(path, dialect=dialect).close()
    assert os.listdir(tmp_path) == ["t.jsonl"] and os.path.isfile(cached(path))


@pytest.mark.parametrize(("head", "own"), [
    (b"", True),
    (b"\n\r\n  ", True),
    (b'{"type":"message","message":{}}\n', True),
    (b'\xef\xbb\xbf\n{ "type" : "compaction", "summary": ""}\n', True),
    (b'{"type": "message"}', True),
    (b'{"id":"m0","type":"message"}\n', False),  # boundctx writes "type" first
    (b'{"type":"session","version":3}\n', False),  # pi's header
    (b'{"type":"user","message":{}}\n', False),  # Claude Code
    (b'{"type":"summary","summary":"s"}\n', False),
    (b'{"parentUuid":null,"type":"user"}\n', False),
    (b'{"timestamp":"t","type":"session_meta"}\n', False),  # Codex
    (b'{"type":"messages"}\n', False),
    (b"not json\n", False),
    (b" " * 600 + b'{"type":"message"}\n', False),  # nothing to go by in the bytes read
])
def test_what_counts_as_boundctxs_own_file(tmp_path, head, own):
    path = tmp_path / "t.jsonl"
    path.write_bytes(head)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert beside_allowed(fd, "auto") is own
        assert beside_allowed(fd, "boundctx") is own
        assert beside_allowed(fd, "pi") is False
    finally:
        os.close(fd)


def test_the_own_type_values_are_the_boundctx_formats():
    assert {v.decode() for v in OWN_TYPES} == set(BOUNDCTX.kinds)
