"""Strict task schemas from closed sets, and the check every output passes in code.

Every task answers a JSON object whose fields are all required, whose choices are enums
of short ids valid for this turn (with an explicit ``"none"`` where nothing is a valid
answer), and where absence is ``null``, never a missing key. The same schema goes to the
decoder (llama.cpp grammar, ``response_format`` remotely) and to :func:`check`, which runs
on every output whatever the decoder promised: constraints are silently ignored by some
servers, and any output can be cut at ``max_tokens``.

String length caps are checked in code only: :func:`for_decoder` removes them, since a
long ``maxLength`` makes a grammar explode and a cut string is caught here anyway.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from boundctx.errors import TaskOutputInvalid

__all__ = ["NONE", "array", "check", "enum", "for_decoder", "nullable", "obj", "parse", "string"]

#: The explicit "nothing" member of a closed set.
NONE = "none"

Schema = dict[str, Any]


def obj(properties: Mapping[str, Schema]) -> Schema:
    """An object with exactly these fields, every one required."""
    return {"type": "object", "properties": dict(properties), "required": list(properties),
            "additionalProperties": False}


def enum(values: Iterable[Any]) -> Schema:
    """One of ``values`` (strings, numbers or booleans; deduplicated, order kept)."""
    members: list[Any] = []
    for v in values:  # dedupe by type and value: True and 1 are different members
        if not any(type(v) is type(m) and v == m for m in members):
            members.append(v)
    if not members:
        raise ValueError("a closed set needs at least one member")
    kinds = {type(v) for v in members}
    if kinds <= {str}:
        return {"type": "string", "enum": members}
    return {"enum": members}


def string(max_length: int | None = None) -> Schema:
    s: Schema = {"type": "string"}
    if max_length is not None:
        s["maxLength"] = max_length
    return s


def array(items: Schema, *, min_items: int = 0, max_items: int | None = None) -> Schema:
    s: Schema = {"type": "array", "items": items}
    if min_items:
        s["minItems"] = min_items
    if max_items is not None:
        s["maxItems"] = max_items
    return s


def nullable(schema: Schema) -> Schema:
    """``schema`` or ``null`` (a required field whose value may be absent)."""
    return {"anyOf": [schema, {"type": "null"}]}


def for_decoder(schema: Schema) -> Schema:
    """``schema`` without string length caps (checked in code instead). Only the
    keyword goes: a property that happens to be named ``maxLength`` stays."""
    if isinstance(schema, list):
        return [for_decoder(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "maxLength" and schema.get("type") == "string":
            continue
        if key == "properties":
            out[key] = {name: for_decoder(sub) for name, sub in value.items()}
        else:
            out[key] = for_decoder(value)
    return out


_JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _problems(schema: Schema, value: Any, path: str) -> list[str]:
    if "anyOf" in schema:
        options = [_problems(s, value, path) for s in schema["anyOf"]]
        if any(not p for p in options):
            return []
        return [f"{path}: matches none of its allowed forms ({'; '.join(p[0] for p in options)})"]
    if "enum" in schema:
        # bool is an int in Python: compare type and value, so true never matches 1.
        if not any(type(value) is type(m) and value == m for m in schema["enum"]):
            shown = ", ".join(json.dumps(m) for m in schema["enum"][:12])
            more = f", ... ({len(schema['enum'])} in all)" if len(schema["enum"]) > 12 else ""
            return [f"{path}: {json.dumps(value)[:80]} is not one of {shown}{more}"]
        return []
    kind = schema.get("type")
    if kind is not None and not _JSON_TYPES[kind](value):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if kind == "object":
        props = schema.get("properties", {})
        missing = [k for k in schema.get("required", ()) if k not in value]
        extra = [k for k in value if k not in props] if schema.get("additionalProperties") is False else []
        out = [f"{path}: missing field {k!r}" for k in missing] + [f"{path}: unexpected field {k!r}" for k in extra]
        for k, sub in props.items():
            if k in value:
                out += _problems(sub, value[k], f"{path}.{k}")
        return out
    if kind == "array":
        out = []
        if len(value) < schema.get("minItems", 0):
            out.append(f"{path}: {len(value)} items, at least {schema['minItems']} required")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{path}: {len(value)} items, at most {schema['maxItems']} allowed")
        for i, item in enumerate(value):
            out += _problems(schema["items"], item, f"{path}[{i}]")
        return out
    if kind == "string" and "maxLength" in schema and len(value) > schema["maxLength"]:
        return [f"{path}: {len(value)} characters, at most {schema['maxLength']} allowed"]
    return []


def check(schema: Schema, value: Any) -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty when it conforms). Handles the subset
    this module builds: type, enum, anyOf, required / additionalProperties, items,
    minItems / maxItems, maxLength."""
    return _problems(schema, value, "$")


def parse(text: str, schema: Schema, *, finish_reason: str | None = None) -> Any:
    """The output ``text`` as a value that conforms to ``schema``.

    Raises
    ------
    TaskOutputInvalid
        Cut at max_tokens, not one JSON value, or outside the schema.
    """
    if finish_reason == "length":
        raise TaskOutputInvalid(f"the output was cut at max_tokens ({len(text)} characters): {text[:120]!r}")
    try:
        value = json.loads(text, strict=False)  # raw control characters inside strings: the quote check decides
    except json.JSONDecodeError as exc:
        raise TaskOutputInvalid(f"not JSON ({exc.msg} at character {exc.pos}): {text[:120]!r}") from None
    problems = check(schema, value)
    if problems:
        raise TaskOutputInvalid("; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5
                                                          else ""))
    return value


def chosen(ids: Sequence[str], path: str) -> list[str]:
    """``ids`` from a multi-choice answer, or TaskOutputInvalid when ``"none"`` is
    chosen with others or an id twice."""
    problems = only_none_alone(ids, path)
    if problems:
        raise TaskOutputInvalid("; ".join(problems))
    return list(ids)


def only_none_alone(ids: Sequence[str], path: str) -> list[str]:
    """A multi-choice answer may be ``["none"]`` or ids without ``"none"``, not both."""
    if NONE in ids and len(ids) > 1:
        return [f"{path}: 'none' cannot be chosen together with {[i for i in ids if i != NONE]}"]
    if len(set(ids)) != len(ids):
        return [f"{path}: an id is chosen twice"]
    return []
