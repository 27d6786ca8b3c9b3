"""Typed argument values from the text a model quoted, in code.

A model copies the words that give an argument (``evidence``) and writes the value as
text; these functions turn that text into the argument's declared type, or raise
``ValueError`` naming what could not be read. Normalising in code, not in the model,
keeps "50" from becoming "50 euros" when a model changes, and lets :func:`supports`
check the typed value against the quote without another model call where it can.
"""

from __future__ import annotations

import json
import re
from typing import Any

from boundctx.understanding.catalog import Param

__all__ = ["normalise", "number_in", "supports"]

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
             "eighth": 8, "ninth": 9, "tenth": 10}
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}


def _words_number(text: str) -> int | None:
    """An English number in words ("twenty five", "a hundred", "first"), or None."""
    words = [w for w in re.split(r"[\s-]+", text.lower().strip()) if w and w != "and"]
    if not words:
        return None
    if len(words) == 1 and words[0] in _ORDINALS:
        return _ORDINALS[words[0]]
    if words[0] == "a" and len(words) > 1 and words[1] in _SCALES:
        words[0] = "one"
    total = current = 0
    seen = False
    for w in words:
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w in _SCALES:
            current = max(current, 1) * _SCALES[w]
            if _SCALES[w] >= 1000:
                total += current
                current = 0
        else:
            return None
        seen = True
    return total + current if seen else None


def _number(text: str, *, integer: bool) -> int | float:
    t = text.strip().rstrip(".")
    m = _NUMBER.fullmatch(t)
    if m:
        value = float(t.replace(",", ""))
        if integer:
            if value != int(value):
                raise ValueError(f"{text!r} is not a whole number")
            return int(value)
        return value
    words = _words_number(t)
    if words is not None:
        return words if integer else float(words)
    raise ValueError(f"{text!r} is not a {'whole ' if integer else ''}number")


def number_in(text: str) -> list[float]:
    """Every number written in ``text``, in digits or in words."""
    found = [float(m.group(0).replace(",", "")) for m in _NUMBER.finditer(text)]
    tokens = re.findall(r"[A-Za-z]+(?:-[A-Za-z]+)*", text)
    i = 0
    while i < len(tokens):
        # the longest run of number words starting here
        for j in range(min(len(tokens), i + 6), i, -1):
            value = _words_number(" ".join(tokens[i:j]))
            if value is not None:
                found.append(float(value))
                i = j - 1
                break
        i += 1
    return found


def _split_list(text: str) -> list[str]:
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        try:
            value = json.loads(t)
            if isinstance(value, list):
                return [v if isinstance(v, str) else json.dumps(v) for v in value]
        except json.JSONDecodeError:
            pass
        t = t[1:-1]
    parts = re.split(r"\s*(?:,|;|\band\b|\bor\b|&)\s*", t)
    return [p.strip().strip("'\"") for p in parts if p.strip().strip("'\"")]


def normalise(value_text: str, param: Param) -> Any:
    """``value_text`` as ``param``'s type.

    Raises
    ------
    ValueError
        Naming the text and the type it is not.
    """
    return _as(value_text, param.type, param.items, param.enum)


def _as(text: str, ptype: str, items: str | None, enum: list[Any] | None) -> Any:
    if enum is not None:
        for member in enum:
            if (isinstance(member, str) and member.lower() == text.strip().lower()) or \
                    (not isinstance(member, str) and str(member) == text.strip()):
                return member
        raise ValueError(f"{text!r} is not one of {enum}")
    if ptype == "integer":
        return _number(text, integer=True)
    if ptype == "number":
        return _number(text, integer=False)
    if ptype == "boolean":
        t = text.strip().lower()
        if t in _TRUE:
            return True
        if t in _FALSE:
            return False
        raise ValueError(f"{text!r} is not yes/no")
    if ptype == "array":
        return [_as(p, items or "any", None, None) for p in _split_list(text)]
    if ptype == "object":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"{text!r} is not a JSON object") from None
        if not isinstance(value, dict):
            raise ValueError(f"{text!r} is not a JSON object")
        return value
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        t = t[1:-1]
    if not t:
        raise ValueError("an empty value")
    return t


def supports(value: Any, evidence: str, param: Param) -> bool:
    """True when the quote plainly gives the typed value (no model needed to check):
    the number is written in it, the text or enum member appears in it, every element
    of a list does. False means "not shown by code", not "wrong": verify decides."""
    ev = evidence.lower()
    if isinstance(value, bool):
        words = _TRUE if value else _FALSE
        return any(re.search(rf"\b{re.escape(w)}\b", ev) for w in words if not w.isdigit())
    if isinstance(value, (int, float)):
        return any(abs(n - value) < 1e-9 for n in number_in(evidence))
    if isinstance(value, str):
        return value.lower() in ev
    if isinstance(value, list):
        return bool(value) and all(supports(v, evidence, Param("item", param.items or "any")) for v in value)
    return False
