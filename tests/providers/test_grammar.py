"""The local provider's schema grammar: every string a catalog or schema can hold
becomes a literal that matches exactly its JSON text, and what llama.cpp cannot parse is
an error, never a crash (llama-cpp-python 0.3.36 adds an unparsed grammar to the sampler
chain as NULL: SIGSEGV). Decoding runs in a subprocess, so a regression is a failed test
with the signal named, not a dead pytest."""

import json
import signal
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")

from boundctx.errors import ResponseSchemaError  # noqa: E402
from boundctx.providers.grammar import schema_grammar, unheld_keywords  # noqa: E402

#: Every kind of string that broke, or could break, the converter's literals.
HOSTILE = {
    "double quote": '12" pizza',
    "lone quote": '"',
    "backslash": "a\\b",
    "escaped quote": '\\"',
    "trailing backslash": "ends with \\",
    "json escape text": "\\u0041",
    "newline": "line\nbreak",
    "carriage return and tab": "a\r\tb",
    "nul": "nul\x00here",
    "control": "\x01\x1f\x7f",
    "line separator": "a\u2028b",
    "non-ascii": "Zoë's café 日本",
    "emoji": "pizza 🍕",
    "lone surrogate": "\ud800x",
    "brackets": "][ | ( ) ::= root",
    "empty": "",
    "long": "x\"\\" * 8 + "y" * 40,
}
LONG = "\"\\\n" * 5000


def _object(name, values):
    return {"type": "object", "properties": {name: {"type": "string", "enum": values}}, "required": [name],
            "additionalProperties": False}


# One model load decodes every case; each line of output is the JSON of one result.
_DECODE = r"""
import json, sys
from boundctx.providers.grammar import checked_grammar
from boundctx.providers.base import Sampling
from boundctx.providers.local import LlamaCppProvider
cases = json.loads(sys.stdin.read())
provider = LlamaCppProvider(n_ctx=2048, n_threads=2)
for case in cases:
    if case.get("grammar") is not None:
        try:
            checked_grammar(provider._model(), case["grammar"])
            print(json.dumps({"error": None}), flush=True)
        except ValueError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
        continue
    sampling = Sampling(seed=case["seed"]) if "seed" in case else None
    reply = provider.chat([{"role": "user", "content": case.get("prompt", "Answer in JSON.")}],
                          max_tokens=case["max_tokens"], temperature=case.get("temperature", 0),
                          schema=case["schema"], sampling=sampling)
    print(json.dumps({"text": reply.text, "reason": reply.finish.reason}), flush=True)
"""


def _decode(cases):
    done = subprocess.run([sys.executable, "-c", _DECODE], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=600)
    if done.returncode < 0:
        pytest.fail(f"the decoding process died of {signal.Signals(-done.returncode).name} "
                    f"after {len(done.stdout.splitlines())} of {len(cases)} cases")
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def _budget(text):
    return 24 + 2 * len(json.dumps(text))  # tokens: an escaped character can cost a token or two


@pytest.fixture(scope="module")
def decoded():
    """What the model wrote for each hostile string as both the property name and the
    only enum value, then for a choice among all of them, then two grammar checks."""
    cases = [{"schema": _object(text, [text]), "max_tokens": 2 * _budget(text)} for text in HOSTILE.values()]
    cases.append({"schema": _object("x", list(HOSTILE.values())), "max_tokens": 400})
    cases += [{"grammar": 'root ::= "unterminated'}, {"grammar": 'root ::= "ok"'},
              {"grammar": schema_grammar(_object(LONG, [LONG, "b"]))}]
    cases += [{"schema": FREE, "prompt": prompt, "max_tokens": 48, "temperature": 1.0, "seed": seed}
              for seed in range(1, 7) for prompt in ("pick values", "Write a short poem, one line a verse.")]
    return _decode(cases)


#: Free strings, where a model at temperature 1 wrote raw newlines (not JSON) before the
#: grammar's characters left out the control characters.
FREE = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}, "poem": {"type": "string"},
                                         "code": {"type": "string", "pattern": "^[a-z].{2}$"}},
        "required": ["s", "poem", "code"], "additionalProperties": False}


def test_every_hostile_string_is_the_only_output_of_its_enum_and_property_name(decoded):
    for (kind, text), out in zip(HOSTILE.items(), decoded):
        assert out["reason"] == "stop", (kind, out)
        assert json.loads(out["text"]) == {text: text}, kind


def test_a_choice_among_hostile_values_decodes_to_one_of_them(decoded):
    out = decoded[len(HOSTILE)]
    assert json.loads(out["text"])["x"] in HOSTILE.values()


def test_a_grammar_llama_cpp_cannot_parse_is_an_error_not_a_crash(decoded):
    bad, good, long = decoded[len(HOSTILE) + 1:len(HOSTILE) + 4]
    assert "cannot parse the grammar" in bad["error"]
    assert good["error"] is None
    assert long["error"] is None  # a 20,000-character value and property name parse


def test_free_strings_sampled_at_temperature_one_are_always_json(decoded):
    for out in decoded[len(HOSTILE) + 4:]:
        if out["reason"] == "stop":  # a reply cut at its budget is cut JSON, as OpenAI's is
            value = json.loads(out["text"])  # no raw control character in a string
            assert len(value["s"]) <= 3 and len(value["code"]) == 3 and '"' not in value["code"], out


def test_a_json_string_and_a_patterns_dot_hold_no_control_character_quote_or_backslash():
    import re
    grammar = schema_grammar(FREE)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    char_class, dot = rules["char"].split(" | ")[0], rules["dot"]
    assert char_class == dot == r'[^"\\\x7F\x00-\x1F]'
    as_regex = re.compile(dot.replace("\\x", "\\x"))
    for c in [chr(k) for k in range(0x20)] + ["\x7f", '"', "\\"]:
        assert not as_regex.fullmatch(c), repr(c)
    assert as_regex.fullmatch("a") and as_regex.fullmatch("é")


def test_a_property_named_empty_does_not_take_the_root_rule():
    grammar = schema_grammar(_object("", ["a"]))
    root = next(line for line in grammar.splitlines() if line.startswith("root ::="))
    assert root.startswith('root ::= "{"')  # the object, not the property's value alone


def test_a_value_json_cannot_hold_is_refused_before_llama_cpp():
    with pytest.raises(ValueError, match="JSON"):
        schema_grammar({"enum": [float("nan")]})


def test_each_constraint_a_grammar_would_not_hold_is_named_by_its_path():
    schema = {"type": "object", "title": "T", "description": "d", "$defs": {"P": {"type": "number", "multipleOf": 2}},
              "properties": {"n": {"type": "integer", "minimum": 3, "default": 4},
                             "e": {"type": "string", "format": "email"}, "d": {"type": "string", "format": "date"},
                             "p": {"type": "string", "pattern": "^a+$", "maxLength": 4},
                             "xs": {"type": "array", "items": {"type": "string", "uniqueItems": True},
                                    "prefixItems": [{"not": {"type": "null"}}]},
                             "o": {"anyOf": [{"type": "object", "minProperties": 1}, {"$ref": "#/$defs/P"}]}},
              "required": ["n"], "additionalProperties": {"type": "integer", "exclusiveMaximum": 9}}
    assert sorted(unheld_keywords(schema)) == sorted([
        "$defs.P.multipleOf", "properties.n.minimum", "properties.e.format", "properties.p.maxLength",
        "properties.xs.items.uniqueItems", "properties.xs.prefixItems[0].not", "properties.o.anyOf[0].minProperties",
        "additionalProperties.exclusiveMaximum"])
    held = {"type": "object", "properties": {"s": {"type": "string", "minLength": 1, "maxLength": 3, "title": "S"},
                                             "u": {"type": "string", "format": "uuid"}, "e": {"enum": [1, "a"]}}}
    assert unheld_keywords(held) == [] and unheld_keywords(True) == []


def test_the_local_provider_refuses_a_schema_it_cannot_hold_before_loading_its_model():
    from boundctx.providers.local import LlamaCppProvider
    provider = LlamaCppProvider(n_ctx=2048, n_threads=1)
    try:
        with pytest.raises(ResponseSchemaError, match="minimum") as caught:
            provider.check_schema({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}})
        assert caught.value.at == "properties.n.minimum"
        with pytest.raises(ResponseSchemaError, match="cannot be made a grammar") as caught:
            provider.check_schema({"type": "bogus"})  # the converter's assertion, as a refusal
        assert caught.value.at == ""
        provider.check_schema({"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}})
        assert provider._llm is None  # nothing was loaded to check
    finally:
        provider.close()
