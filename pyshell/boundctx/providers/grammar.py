"""JSON schemas as llama.cpp grammars, for every string a user can write.

llama-cpp-python 0.3.36 converts a schema with ``llama_grammar.SchemaConverter``, whose
string literals break on user text (see :func:`_schema_converter`), and hands llama.cpp
a grammar it cannot parse as a NULL sampler, which crashes the process. Here the
literals are escaped for GBNF, and every grammar is parsed once before it is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from boundctx.tokens.llama import _llama_cpp  # ImportError with the install hint; routes llama.cpp's log

__all__ = ["checked_grammar", "schema_grammar", "unheld_keywords"]

#: The keywords llama-cpp-python 0.3.36's converter makes a grammar of (where a schema
#: holds several, the converter may still honour one: see :func:`unheld_keywords`).
HELD = frozenset({"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
                  "maxItems", "minLength", "maxLength", "pattern", "enum", "const", "anyOf", "oneOf", "allOf",
                  "$ref", "$defs", "definitions", "format"})
#: Keywords that say something of a value without constraining it.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
                         "readOnly", "writeOnly"})
#: The string formats the converter holds.
FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
#: A JSON string's characters: none of the control characters JSON forbids unescaped
#: (the converter's ``[^"\\]`` let a model write a raw newline, and the answer was not
#: JSON), and in a pattern's ``.`` no quote or backslash either, which would end or escape
#: the string the pattern is in.
_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
_DOT = r'[^"\\\x7F\x00-\x1F]'


# GBNF's escapes inside a "..." literal (llama.cpp's grammar-parser.cpp, parse_char).
_GBNF_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _gbnf_literal(text: str) -> str:
    """``text`` as a GBNF literal that matches exactly its characters."""
    out = []
    for c in text:
        if c in _GBNF_ESCAPES:
            out.append(_GBNF_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        elif "\ud800" <= c <= "\udfff":  # no UTF-8 form: no token can write it
            raise ValueError(f"a grammar literal cannot hold the lone surrogate U+{ord(c):04X} (in {text[:80]!r})")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _json_text(value: Any) -> str:
    r"""``value`` as the JSON text the model writes: non-ASCII as itself, a lone
    surrogate as its ``\uXXXX`` escape, NaN and infinities refused (not JSON)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@lru_cache(maxsize=1)
def _schema_converter():
    r"""llama-cpp-python's JSON-schema-to-GBNF converter with what breaks on user strings
    mended (0.3.36, ``llama_grammar.SchemaConverter``).

    Its literals escape ``"`` but not the backslash before it: the JSON text of
    ``12" pizza`` (``"12\" pizza"``) became ``"\"12\\" pizza\""``, which llama.cpp
    cannot parse; ``llama_sampler_init_grammar`` returns NULL and llama-cpp-python adds
    it to the sampler chain anyway (SIGSEGV). A backslash or ``\n`` in a value was read
    as a GBNF escape (``a\b`` came out as a backspace), and a property named ``""``
    took the rule name ``root``, so the grammar was that property's value alone.
    """
    base = _llama_cpp().llama_grammar.SchemaConverter

    class _Converter(base):
        _root_taken = False

        def _format_literal(self, literal: str) -> str:
            return _gbnf_literal(literal)

        def _generate_constant_rule(self, value: Any) -> str:
            return _gbnf_literal(_json_text(value))

        def _add_rule(self, name: str, rule: str) -> str:
            if name == "char":
                rule = _CHAR
            elif name == "dot":
                rule = _DOT
            return super()._add_rule(name, rule)

        def visit(self, schema: Any, name: str) -> str:
            if not name and self._root_taken:
                name = "empty"  # the rule's name only; the key the model writes stays ""
            self._root_taken = True
            return super().visit(schema, name)

    return _Converter


def schema_grammar(schema: Mapping[str, Any]) -> str:
    """The GBNF grammar of a JSON schema (what the local provider decodes with).

    Every string in ``schema`` (enum and const values, property names) becomes a literal
    that matches exactly its JSON text.

    Raises
    ------
    ValueError
        The schema holds what no JSON output can match (NaN, a lone surrogate in a
        pattern) or what the converter does not support.
    """
    converter = _schema_converter()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        resolved = converter.resolve_refs(json.loads(json.dumps(schema, allow_nan=False)), "stdin")
        converter.visit(resolved, "")
    except (AssertionError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        # The converter asserts on what it does not know ({"type": "bogus"}, "not").
        raise ValueError(f"the schema cannot be made a grammar: {type(exc).__name__}: {exc}") from None
    return converter.format_grammar()


def unheld_keywords(schema: Any, at: str = "") -> list[str]:
    """Where ``schema`` asks for what a grammar from it would not hold, as paths into
    it (``properties.n.minimum``): a keyword the converter does not make a grammar of
    (``minimum``, ``multipleOf``, ``uniqueItems``, ``not``...), a string format it does
    not know (``email``), or ``minLength``/``maxLength`` beside a ``pattern`` (the
    pattern wins). Annotations (``title``, ``description``, ``default``...) are not
    constraints. Empty: every constraint is held."""
    if isinstance(schema, bool) or not isinstance(schema, dict):
        return []
    where = f"{at}." if at else ""
    out = [f"{where}{key}" for key in schema if key not in HELD and key not in ANNOTATIONS]
    if "format" in schema and schema["format"] not in FORMATS:
        out.append(f"{where}format")
    if "pattern" in schema:
        out += [f"{where}{key}" for key in ("minLength", "maxLength") if key in schema]
    for key in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                out += unheld_keywords(sub, f"{where}{key}.{name}")
    for key in ("items", "additionalProperties"):
        out += unheld_keywords(schema.get(key), f"{where}{key}")
    for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            for k, sub in enumerate(schema[key]):
                out += unheld_keywords(sub, f"{where}{key}[{k}]")
    return out


def checked_grammar(llm: Any, text: str):
    """A ``LlamaGrammar`` that llama.cpp has parsed: llama-cpp-python 0.3.36 adds a
    grammar it cannot parse to the sampler chain as NULL, which crashes the process."""
    llama_cpp = _llama_cpp()
    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, text.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(f"llama.cpp cannot parse the grammar built from the schema (see the "
                         f"boundctx.llama_cpp log); it begins {text[:200]!r}")
    llama_cpp.llama_sampler_free(sampler)
    return llama_cpp.LlamaGrammar.from_string(text, verbose=False)
