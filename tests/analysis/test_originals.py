"""read_chat_section: exact bounded ranges of this reply's originals only."""

import json

import pytest

from boundctx.analysis import READ_TOOL_NAME, Originals
from boundctx.analysis.originals import MAX_NAME_CHARS, name_originals
from boundctx.errors import SectionReadError

LOG = "line 1: ok\nline 2: id=7f3a9c11 failed\nline 3: ok\n" * 10


def test_a_read_returns_exactly_the_range():
    o = Originals(max_read_chars=100)
    oid = o.add(LOG, "build.log")
    assert o.read(oid, 11, 36) == LOG[11:36]
    assert o.call(json.dumps({"section_id": oid, "start": 0, "end": 10})) == LOG[:10]
    assert o.read(oid, len(LOG), len(LOG)) == ""


def test_ids_belong_to_one_reply():
    a, b = Originals(), Originals()
    oid = a.add(LOG, "x")
    assert oid not in b
    with pytest.raises(SectionReadError, match="no original"):
        b.read(oid, 0, 5)


@pytest.mark.parametrize("start,end", [(-1, 5), (5, 4), (0, 10_000), (True, 5), ("0", 5), (0, 5.0)])
def test_bad_ranges_are_refused(start, end):
    o = Originals(max_read_chars=10_000)
    oid = o.add(LOG, "x")
    with pytest.raises(SectionReadError):
        o.read(oid, start, end)


def test_a_read_is_bounded():
    o = Originals(max_read_chars=20)
    oid = o.add(LOG, "x")
    with pytest.raises(SectionReadError, match="at most 20"):
        o.read(oid, 0, 21)


def test_it_cannot_be_pointed_at_a_path_or_given_other_arguments(tmp_path):
    o = Originals()
    o.add(LOG, "x")
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    with pytest.raises(SectionReadError, match="no original"):
        o.call({"section_id": str(secret), "start": 0, "end": 5})
    with pytest.raises(SectionReadError, match="takes section_id with start and end, with key, or with search"):
        o.call({"section_id": "x", "start": 0, "end": 5, "path": str(secret)})
    with pytest.raises(SectionReadError, match="not JSON"):
        o.call("{nope")


def test_the_tool_schema_names_only_this_replys_ids():
    o = Originals()
    ids = [o.add("a", "one"), o.add("b", "two")]
    schema = o.tool_schema()
    assert schema["function"]["name"] == READ_TOOL_NAME
    assert schema["function"]["parameters"]["properties"]["section_id"]["enum"] == ids


def test_a_key_is_read_from_the_range_noted_for_it_whatever_it_is_called_like():
    o = Originals(max_read_chars=50)
    text = "alpha " * 10 + "The port of api is 8080.\n" + "beta " * 20
    oid = o.add(text, "x")
    at = text.index("The port")
    o.set_keys(oid, [("Port of API", at, at + 24), ("timeout of db", 0, 200)])
    assert o.call({"section_id": oid, "key": "port  of api"}) == "The port of api is 8080."
    assert len(o.call({"section_id": oid, "key": "timeout of db"})) == 50  # within the read bound
    with pytest.raises(SectionReadError, match="no key 'port of web'.*Port of API"):
        o.call({"section_id": oid, "key": "port of web"})
    with pytest.raises(SectionReadError, match="a key or a range"):
        o.call({"section_id": oid, "key": "port of api", "start": 0, "end": 5})
    with pytest.raises(SectionReadError, match="no original"):
        o.call({"section_id": "other.log", "key": "port of api"})


def test_the_schema_counted_before_any_original_is_the_schema_once_they_are_kept():
    originals = Originals()
    labels = ["build.log", "build.log", 'a "quoted"\\name\n', "x" * 200]
    ahead = originals.tool_schema_for(name_originals(labels))
    names = [originals.add(f"text {k}", label) for k, label in enumerate(labels)]
    assert ahead == originals.tool_schema()
    assert names[:3] == ["build.log", "build.log (2)", "a quoted name"]  # a grammar-safe name, never a quote
    assert len(names[3]) == MAX_NAME_CHARS and names[3].startswith("x") and "…" in names[3]
    assert originals.read(names[1], 0, 6) == "text 1"
    assert originals.tool_schema_for([])["function"]["parameters"]["properties"]["section_id"]["enum"] == []
