"""Task schemas: the code-side check agrees with an independent JSON-schema validator on
every schema the builders make, and parse refuses what a task must not accept."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx.errors import TaskOutputInvalid
from boundctx.understanding import schema as S

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is the reference validator (pip install jsonschema)")

IDS = st.lists(st.sampled_from(["o1", "o2", "r1", "none", "u3"]), min_size=1, max_size=4, unique=True)


@st.composite
def schemas(draw, depth=0):
    """Schemas as the task builders make them."""
    kinds = ["enum", "string", "nullable_string"] + (["obj", "array"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "enum":
        return S.enum(draw(IDS))
    if kind == "string":
        return S.string(draw(st.none() | st.integers(0, 6)))
    if kind == "nullable_string":
        return S.nullable(S.string(draw(st.none() | st.integers(0, 6))))
    if kind == "array":
        lo = draw(st.integers(0, 2))
        return S.array(draw(schemas(depth + 1)), min_items=lo, max_items=draw(st.none() | st.integers(lo, 3)))
    names = draw(st.lists(st.sampled_from(["a", "b", "evidence", "value"]), min_size=1, max_size=3, unique=True))
    return S.obj({n: draw(schemas(depth + 1)) for n in names})


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "o1", "none", "abcdefgh"]),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["a", "b", "evidence", "value", "x"]), inner, max_size=3),
                    max_leaves=8)


@given(schemas(), JSON)
def test_check_agrees_with_jsonschema(schema, value):
    reference = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert (S.check(schema, value) == []) == reference


@given(schemas())
def test_the_decoder_schema_differs_only_by_length_caps(schema):
    decoder = S.for_decoder(schema)
    assert "maxLength" not in json.dumps(decoder)
    assert json.dumps(schema).count('"type"') == json.dumps(decoder).count('"type"')


def test_true_is_not_one_and_none_stands_alone():
    assert S.check(S.enum([1, 2]), True) != []
    assert S.check(S.enum(["o1", "none"]), "o1") == []
    assert S.only_none_alone(["none", "o1"], "$.x") and S.only_none_alone(["o1", "o1"], "$.x")
    assert S.only_none_alone(["none"], "$.x") == []


def test_parse_refuses_cut_invalid_and_out_of_set_outputs():
    schema = S.obj({"record": S.enum(["r1", "none"])})
    assert S.parse('{"record": "r1"}', schema) == {"record": "r1"}
    for text, finish, why in [('{"record": "r1"}', "length", "cut at max_tokens"),
                              ('{"record": ', None, "not JSON"),
                              ('{"record": "r7"}', None, "is not one of"),
                              ('{"record": "r1", "why": "x"}', None, "unexpected field"),
                              ("{}", None, "missing field 'record'")]:
        with pytest.raises(TaskOutputInvalid, match=why):
            S.parse(text, schema, finish_reason=finish)


def test_word_numbers_are_exact_integers_where_json_schema_would_take_a_float():
    """A span's ends index the message: 1.0 is refused although JSON Schema counts it as
    the integer 1 (deliberately stricter)."""
    ends = S.enum([1, 2, 3])
    assert jsonschema.Draft202012Validator(ends).is_valid(1.0)
    assert S.check(ends, 1.0) != [] and S.check(ends, 1) == []
    assert S.check(S.enum([True, 1]), 1) == [] and S.enum([True, 1])["enum"] == [True, 1]


def test_the_decoder_keeps_a_property_that_happens_to_be_named_max_length():
    schema = S.obj({"maxLength": S.string(5), "b": S.nullable(S.string(3))})
    decoder = S.for_decoder(schema)
    assert list(decoder["properties"]) == ["maxLength", "b"] and decoder["required"] == ["maxLength", "b"]
    assert "maxLength" not in decoder["properties"]["maxLength"]
    assert "maxLength" not in json.dumps(decoder["properties"]["b"])
