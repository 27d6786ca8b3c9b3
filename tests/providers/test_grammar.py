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

from boundctx.providers.grammar import schema_grammar  # noqa: E402

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
    reply = provider.chat([{"role": "user", "content": "Answer in JSON."}], max_tokens=case["max_tokens"],
                          temperature=0, schema=case["schema"])
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
    return _decode(cases)


def test_every_hostile_string_is_the_only_output_of_its_enum_and_property_name(decoded):
    for (kind, text), out in zip(HOSTILE.items(), decoded):
        assert out["reason"] == "stop", (kind, out)
        assert json.loads(out["text"]) == {text: text}, kind


def test_a_choice_among_hostile_values_decodes_to_one_of_them(decoded):
    out = decoded[len(HOSTILE)]
    assert json.loads(out["text"])["x"] in HOSTILE.values()


def test_a_grammar_llama_cpp_cannot_parse_is_an_error_not_a_crash(decoded):
    bad, good, long = decoded[len(HOSTILE) + 1:]
    assert "cannot parse the grammar" in bad["error"]
    assert good["error"] is None
    assert long["error"] is None  # a 20,000-character value and property name parse


def test_a_property_named_empty_does_not_take_the_root_rule():
    grammar = schema_grammar(_object("", ["a"]))
    root = next(line for line in grammar.splitlines() if line.startswith("root ::="))
    assert root.startswith('root ::= "{"')  # the object, not the property's value alone


def test_a_value_json_cannot_hold_is_refused_before_llama_cpp():
    with pytest.raises(ValueError, match="JSON"):
        schema_grammar({"enum": [float("nan")]})
