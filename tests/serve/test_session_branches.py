"""A session whose entries fork (a rewind) through the sessions API on a real loopback
server: windows follow the active branch, ``leaf`` reads another, ``/branches`` lists
them, and a page is bounded in bytes as well as in messages."""

import json

import httpx
import pytest

from boundctx.serve import create_app
from boundctx.transcript.store import Transcript

from tests._support import rewound_session

API = "/boundctx/v1/sessions"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path / "cache"))
    d = tmp_path / "sessions"
    d.mkdir()
    return d


@pytest.fixture
def server(folder):
    from boundctx.providers import ScriptedProvider

    from tests._support.running import Running

    app = create_app(ScriptedProvider(lambda request: "unused"), host="127.0.0.1", sessions_dir=str(folder))
    running = Running(app)
    running.http = httpx.Client(base_url=running.url, timeout=10)
    yield running
    running.http.close()
    running.stop()


def rewound(folder, sid="tree", size=10):
    """A pi session: m0..m5, then a rewind to m1 and n2, n3 after it."""
    records = rewound_session(old_text="old {k} " + "o" * size, new_text="new {k}")
    path = folder / f"{sid}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def ids(window):
    return [m["record"]["id"] for m in window["messages"]]


def assert_error(r, status, param):
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_a_rewound_session_is_read_along_its_active_branch_and_lists_the_other(server, folder):
    rewound(folder)
    h = server.http
    w = h.get(f"{API}/tree/messages").json()
    assert ids(w) == ["m0", "m1", "n2", "n3"] and w["message_count"] == 4 and w["leaf"] == 8
    meta = h.get(f"{API}/tree").json()
    assert meta["message_count"] == 4 and meta["in_file_order"] is False
    branches = h.get(f"{API}/tree/branches").json()
    assert branches["branch_count"] == 2 and branches["has_more"] is False
    assert [(b["leaf_id"], b["message_count"], b["shared"], b["active"]) for b in branches["data"]] == [
        ("n3", 4, 4, True), ("m5", 6, 2, False)]
    old = branches["data"][1]
    by_id = h.get(f"{API}/tree/messages", params={"leaf": "m5", "message_limit": 3}).json()
    by_line = h.get(f"{API}/tree/messages", params={"leaf": old["leaf"], "message_limit": 3}).json()
    assert ids(by_id) == ids(by_line) == ["m3", "m4", "m5"] and by_id["message_start"] == 3
    before = h.get(f"{API}/tree/messages", params={"leaf": "m5", "message_before": 3}).json()
    assert ids(before) == ["m0", "m1", "m2"] and not before["has_more_before"]
    one = h.get(f"{API}/tree/messages/2", params={"leaf": "m5"}).json()
    assert one["record"]["id"] == "m2"
    assert h.get(f"{API}/tree/messages/2").json()["record"]["id"] == "n2"
    assert h.get(f"{API}/tree/branches", params={"limit": 1}).json()["has_more"] is True


def test_a_bad_leaf_or_page_is_a_400_naming_it_and_the_server_keeps_serving(server, folder):
    rewound(folder)
    h = server.http
    assert_error(h.get(f"{API}/tree/messages", params={"leaf": "nope"}), 400, "leaf")
    assert_error(h.get(f"{API}/tree/messages", params={"leaf": "999999"}), 400, "leaf")
    assert_error(h.get(f"{API}/tree/messages", params={"leaf": "x" * 300}), 400, "leaf")
    assert_error(h.get(f"{API}/tree/messages", params={"leaf": "m5", "message_before": 7}), 400, "message_before")
    assert_error(h.get(f"{API}/tree/messages", params={"page_bytes": 0}), 400, "page_bytes")
    assert_error(h.get(f"{API}/tree/messages/5", params={"leaf": "n3"}), 404, "index")
    assert_error(h.get(f"{API}/tree/branches", params={"limit": 0}), 400, "limit")
    assert h.get(f"{API}/tree/messages").status_code == 200


def test_a_window_is_bounded_in_bytes_and_pages_on(server, folder):
    path = rewound(folder, size=5000)
    h = server.http
    w = h.get(f"{API}/tree/messages", params={"leaf": "m5", "page_bytes": 12000}).json()
    shown = sum(m["length"] - m["cut_bytes"] for m in w["messages"])
    assert ids(w) == ["m4", "m5"] and shown <= 12000 and w["page_bytes"] == 12000
    seen = ids(w)
    while w["has_more_before"]:
        w = h.get(f"{API}/tree/messages", params={"leaf": "m5", "page_bytes": 12000,
                                                 "message_before": w["message_start"]}).json()
        seen = ids(w) + seen
    assert seen == [f"m{k}" for k in range(6)]
    with Transcript.open(path) as t:
        assert [m.record["id"] for m in t.window(leaf="m5", page_bytes=12000).messages] == ["m4", "m5"]


def test_a_leaf_of_digits_names_the_entry_that_has_that_id(server, folder):
    records = [{"type": "message", "id": f"{k + 100:08d}", "parentId": f"{k + 99:08d}" if k else None,
                "message": {"role": "user", "content": f"turn {k}"}} for k in range(12)]
    records.append({"type": "message", "id": "late", "parentId": "00000103",
                    "message": {"role": "user", "content": "rewound"}})
    (folder / "digits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    w = server.http.get(f"{API}/digits/messages", params={"leaf": "00000110", "message_limit": 1}).json()
    assert ids(w) == ["00000110"] and w["message_count"] == 11
    w = server.http.get(f"{API}/digits/messages", params={"leaf": "5", "message_limit": 1}).json()
    assert ids(w) == ["00000105"]
