"""Pages bounded in bytes as well as in messages: a window holds the newest messages whose
shown bytes fit the page together (the newest always), and paging back by
``message_start`` visits every message once, in order, on a list and on a branch."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundctx.transcript import Transcript


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path / "cache"))


def shown(entry) -> int:
    return entry.length - entry.cut_bytes


def write(path, sizes, *, tree: bool):
    lines = []
    for k, size in enumerate(sizes):
        record = {"type": "message", "id": f"m{k}", "message": {"role": "user", "content": "x" * size}}
        if tree:
            record["parentId"] = f"m{k - 1}" if k else None
        lines.append(json.dumps(record))
    if tree:  # a rewind: an abandoned branch the pages must never show
        lines.append(json.dumps({"type": "message", "id": "gone", "parentId": "m0",
                                 "message": {"role": "user", "content": "abandoned"}}))
        lines.append(json.dumps({"type": "message", "id": f"m{len(sizes)}", "parentId": f"m{len(sizes) - 1}",
                                 "message": {"role": "user", "content": "back"}}))
        sizes = [*sizes, 4]
    path.write_text("\n".join(lines) + "\n")
    return len(sizes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=40), page=st.integers(1, 9000),
       limit=st.integers(1, 12), content=st.one_of(st.none(), st.integers(1, 2000)), tree=st.booleans())
def test_paging_by_bytes_visits_every_message_once_in_full_pages(tmp_path, sizes, page, limit, content, tree):
    path = tmp_path / f"t{len(sizes)}-{page}-{limit}-{content}-{tree}.jsonl"
    n = write(path, sizes, tree=tree)
    with Transcript.open(path) as t:
        full = [m.line for m in t.window(message_limit=None).messages]
        assert len(full) == n
        seen: list[int] = []
        before = None
        while True:
            w = t.window(message_before=before, message_limit=limit, content_limit=content, page_bytes=page)
            assert w.messages, "a page always holds the newest message before its cursor"
            assert [m.index for m in w.messages] == list(range(w.message_start, w.message_start + len(w.messages)))
            used = sum(shown(m) for m in w.messages)
            assert len(w.messages) <= limit
            assert used <= page or len(w.messages) == 1
            if w.message_start > 0 and len(w.messages) < limit:
                # Full: the next older message would not have fitted.
                older = t.window(message_before=w.message_start, message_limit=1, content_limit=content)
                assert used + shown(older.messages[0]) > page
            assert w.has_more_before == (w.message_start > 0)
            seen = [m.line for m in w.messages] + seen
            if not w.has_more_before:
                break
            before = w.message_start
        assert seen == full


def test_the_renderer_preset_bounds_a_page_of_long_messages(tmp_path):
    """100 messages of 64 KiB each were a 6 MB page; the renderer preset's page holds
    1 MiB of them, and the page before goes on from where it began."""
    path = tmp_path / "long.jsonl"
    write(path, [70_000] * 120, tree=False)
    with Transcript.open(path) as t:
        w = t.window(preset="renderer")
        used = sum(shown(m) for m in w.messages)
        assert used <= 1 << 20 and len(w.messages) == (1 << 20) // shown(w.messages[-1])
        assert w.page_bytes == 1 << 20 and w.has_more_before
        older = t.window(preset="renderer", message_before=w.message_start)
        assert older.messages[-1].index == w.message_start - 1
        wide = t.window(preset="renderer", settings={"transcript.window_page_bytes": 64 << 20})
        assert len(wide.messages) == 100


def test_a_page_budget_out_of_range_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    write(path, [10, 10], tree=False)
    with Transcript.open(path) as t:
        with pytest.raises(ValueError, match="page_bytes must be >= 1"):
            t.window(page_bytes=0)
        with pytest.raises(TypeError, match="page_bytes"):
            t.window(page_bytes="1")  # type: ignore[arg-type]
