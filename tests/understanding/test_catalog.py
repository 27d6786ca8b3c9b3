"""Catalogs: loaded from TOML, JSON or BFCL function lists, refused clearly when wrong."""

import json

import pytest

from boundctx.errors import CatalogError
from boundctx.understanding import Catalog, Record, check_records

from tests._support import SHARED_DATA
from tests._support.booking import CATALOG

TOML = '''
name = "bookings"

[[workflows]]
name = "dining"
operations = ["book_table"]

[[operations]]
name = "book_table"
description = "Reserve a table"
record_kind = "restaurant"
workflow = "dining"

[[operations.params]]
name = "party_size"
type = "integer"
description = "how many people"

[[operations.params]]
name = "seating"
type = "string"
enum = ["inside", "terrace"]
required = false
default = "inside"
'''


def test_a_toml_and_a_json_catalog_load_the_same(tmp_path):
    (tmp_path / "c.toml").write_text(TOML)
    catalog = Catalog.load(tmp_path / "c.toml")
    op = catalog.operation("book_table")
    assert op.record_kind == "restaurant" and op.param("seating").enum == ["inside", "terrace"]
    assert op.param("seating").default == "inside" and not op.param("seating").required
    (tmp_path / "c.json").write_text(json.dumps(CATALOG))
    assert [o.name for o in Catalog.load(tmp_path / "c.json").operations] == [o["name"] for o in CATALOG["operations"]]


@pytest.mark.parametrize("change, message", [
    (lambda c: c["operations"][0].update(colour="red"), "unknown field `colour`"),
    (lambda c: c["operations"][0]["params"][0].update(type="flaot"), "type 'flaot' is not one of"),
    (lambda c: c["operations"].append(dict(c["operations"][1])), "used twice"),
    (lambda c: c["operations"][0]["params"][0].update(enum=[1, 2]), "not of type string"),
    (lambda c: c["operations"][0]["params"][1].update(enum=[]), "at least one value"),
    (lambda c: c["operations"][0].update(workflow="travel"), "workflow 'travel' is not declared"),
    (lambda c: c["workflows"][0]["operations"].append("fly"), "do not exist: ['fly']"),
    (lambda c: c["operations"][0]["params"][1].update(default="x"), "the default 'x' is not of type integer"),
    (lambda c: c.update(operations=[]), "at least one operation"),
    (lambda c: c["operations"][0].update(name=" "), "non-empty single line"),
    (lambda c: c["operations"][0]["params"][0].update(items="string"), "items applies to arrays only"),
])
def test_a_bad_catalog_is_refused_naming_the_field(change, message):
    data = json.loads(json.dumps(CATALOG))
    change(data)
    with pytest.raises(CatalogError, match="booking-test") as info:
        Catalog.from_dict(data, source="booking-test")
    assert message in str(info.value)


def test_unreadable_files_say_what_is_wrong(tmp_path):
    with pytest.raises(CatalogError, match="cannot read"):
        Catalog.load(tmp_path / "missing.toml")
    (tmp_path / "c.yaml").write_text("x")
    with pytest.raises(CatalogError, match=".toml or .json"):
        Catalog.load(tmp_path / "c.yaml")
    (tmp_path / "c.toml").write_text("[[operations]\n")
    with pytest.raises(CatalogError, match="not valid TOML"):
        Catalog.load(tmp_path / "c.toml")
    (tmp_path / "c.json").write_text("[1]")
    with pytest.raises(CatalogError, match="top level"):
        Catalog.load(tmp_path / "c.json")


def test_every_bfcl_function_list_converts():
    files = sorted((SHARED_DATA / "bfcl").glob("BFCL_v4_*.json"))
    if not files:
        pytest.skip(f"BFCL data not found under {SHARED_DATA / 'bfcl'} (a clone without ../shared)")
    converted = 0
    for path in files:
        for line in path.read_text().splitlines():
            item = json.loads(line)
            catalog = Catalog.from_bfcl(item["function"], source=item["id"])
            assert [o.name for o in catalog.operations] == [f["name"] for f in item["function"]]
            for fn, op in zip(item["function"], catalog.operations):
                assert [p.name for p in op.params] == list(fn["parameters"].get("properties", {}))
                assert {p.name for p in op.params if p.required} == set(fn["parameters"].get("required", []))
            converted += 1
    assert converted >= 1240


def test_bfcl_types_and_string_defaults_are_mapped():
    catalog = Catalog.from_bfcl([{"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "a": {"type": "float"}, "b": {"type": "tuple", "items": {"type": "integer"}}, "c": {"type": "dict"},
        "d": {"type": "boolean", "default": "false"}, "e": {"type": "integer", "default": "5 years"}},
        "required": ["a"]}}])
    params = {p.name: p for p in catalog.operations[0].params}
    assert [(p.type, p.items) for p in params.values()][:3] == [("number", None), ("array", "integer"),
                                                                ("object", None)]
    assert params["d"].default is False and params["e"].default is None
    with pytest.raises(CatalogError, match="not a BFCL function spec"):
        Catalog.from_bfcl([{"description": "no name"}])


def test_records_are_checked_against_the_catalog():
    catalog = Catalog.from_dict(CATALOG)
    assert check_records([{"id": "x", "kind": "booking"}], catalog) == [Record("x", "booking")]
    for records, message in [([{"id": "x", "kind": "booking"}] * 2, "used twice"),
                             ([{"id": "x", "kind": "car"}], "known kinds: ['booking', 'restaurant']"),
                             ([{"id": "", "kind": "booking"}], "must not be empty"),
                             ([{"id": "x"}], "missing required field `kind`")]:
        with pytest.raises(CatalogError, match="records\\[") as info:
            check_records(records, catalog)
        assert message in str(info.value)


def test_the_shipped_example_catalog_and_records_load():
    from tests._support import ROOT
    catalog = Catalog.load(ROOT / "examples" / "bookings.toml")
    records = json.loads((ROOT / "examples" / "on-screen.json").read_text())
    assert len(check_records(records, catalog)) == 4
    assert catalog.operation("book_table").param("party_size").type == "integer"
