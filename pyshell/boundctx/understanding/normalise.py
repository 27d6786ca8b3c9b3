"""Typed argument values from the text a model quoted, in code.

A model copies the words that give an argument (``evidence``) and writes the value as
text; these functions turn that text into the argument's declared type, or raise
``ValueError`` naming what could not be read. Normalising in code, not in the model,
keeps "50" from becoming "50 euros" when a model changes, and lets :func:`supports`
check the typed value against the quote without another model call where it can.
:func:`ungrounded` is the weaker test every value must pass before one model's word
may keep it: code can see it in the message at all (decision 0017).
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from typing import Any

from boundctx.understanding.catalog import Param

__all__ = ["normalise", "number_in", "supports", "ungrounded"]

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


def _exact(digits: str) -> int | Fraction:
    """A number written in digits, exactly: an int when it is whole, else a Fraction
    (so 12345678901234567891 stays itself and 0.1 + 0.2 compares right)."""
    text = digits.replace(",", "")
    mantissa, _, exponent = text.lower().partition("e")
    if exponent and abs(int(exponent)) > 308 or len(mantissa) > 400:
        raise ValueError(f"{digits!r} is too large a number")  # and would cost memory to build exactly
    value = Fraction(text)
    return int(value) if value.denominator == 1 else value


def _number(text: str, *, integer: bool) -> int | float:
    t = text.strip().rstrip(".")
    m = _NUMBER.fullmatch(t)
    if m:
        try:
            value = _exact(t)
        except (ValueError, ZeroDivisionError, OverflowError) as exc:
            raise ValueError(str(exc) if "too large" in str(exc) else f"{text!r} is not a number") from None
        if integer:
            if not isinstance(value, int):
                raise ValueError(f"{text!r} is not a whole number")
            return value
        as_float = float(value)
        if math.isinf(as_float):
            raise ValueError(f"{text!r} is too large a number")
        return as_float
    words = _words_number(t)
    if words is not None:
        return words if integer else float(words)
    raise ValueError(f"{text!r} is not a {'whole ' if integer else ''}number")


# A number inside a quote is a whole token: a sign only where the token starts, and no
# letter, digit or joiner on either side, so the "-101" of "T-101", the parts of
# "2024-05-01" and "3-4", and the 5 of "5-year" or "7pm" are not numbers (decision: code
# confirms a value only from a quote that really is that value; the rest goes to verify).
_NUMBER_TOKEN = re.compile(r"(?<![\w.,+\-/:\u2212\u2013\u2014])(?:" + _NUMBER.pattern + r")(?![\w/:]|[.,+\-]\w)")
_NEGATIVE_WORD = re.compile(r"\b(?:minus|negative)\s+$", re.IGNORECASE)
_WORD_TOKEN = re.compile(r"(?<![\w\-])[A-Za-z]+(?:-[A-Za-z]+)*(?![\w\-])")


def _numbers(text: str) -> tuple[list[int | Fraction], bool]:
    """The numbers ``text`` writes (as :func:`number_in`), and whether a digit is left
    outside them (an id, a date, a range, a time: something a number was read from)."""
    found: list[int | Fraction] = []
    rest = text
    for m in _NUMBER_TOKEN.finditer(text):
        try:
            value = _exact(m.group(0))
        except (ValueError, ZeroDivisionError):
            continue
        if m.group(0)[0] not in "+-" and _NEGATIVE_WORD.search(text, 0, m.start()):
            value = -value  # "minus 5"
        found.append(value)
        rest = rest[:m.start()] + " " * (m.end() - m.start()) + rest[m.end():]
    tokens = list(_WORD_TOKEN.finditer(text))
    i = 0
    while i < len(tokens):
        # the longest run of number words starting here
        for j in range(min(len(tokens), i + 6), i, -1):
            words = _words_number(" ".join(t.group(0) for t in tokens[i:j]))
            if words is not None:
                negative = _NEGATIVE_WORD.search(text, 0, tokens[i].start())
                found.append(-words if negative else words)
                i = j - 1
                break
        i += 1
    return found, re.search(r"\d", rest) is not None


def number_in(text: str) -> list[int | Fraction]:
    """Every number written in ``text``, in digits or in words, exactly: a digit token
    that is a whole number with its sign (``-5``, ``minus 5``), not a digit run inside an
    id, a date or a range (``T-101``, ``2024-05-01``, ``3-4``)."""
    return _numbers(text)[0]


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
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        for member in enum:
            if isinstance(member, str):
                if member.lower() == text.strip().lower():
                    return member
            elif type(parsed) is type(member) and parsed == member:  # true is not 1
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


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip(_EDGE)).lower()


_EDGE = " \t\n\"'`.,;:!?()[]{}"


def supports(value: Any, evidence: str, param: Param) -> bool:
    """True when the quote is the value and nothing else, so code can confirm it
    without a model: a number is the only number the quote writes, a text is the
    quote itself, a yes/no is a quote that says only yes or no, a list is exactly its
    elements. Anything wider or looser (a whole clause quoted for a number, "on Friday"
    for a yes) goes to verify. False means "not shown by code", not "wrong"."""
    if isinstance(value, bool):
        return _plain(evidence) in (("true", "yes") if value else ("false", "no"))
    if isinstance(value, (int, float)):
        numbers, stray = _numbers(evidence)
        return (not stray and len(numbers) == 1
                and numbers[0] == (_exact(repr(value)) if isinstance(value, float) else value))
    if isinstance(value, str):
        return bool(_plain(value)) and _plain(value) == _plain(evidence)
    if isinstance(value, list):
        if not value:
            return False
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            written, stray = _numbers(evidence)
            return not stray and written == [_exact(repr(v)) if isinstance(v, float) else v for v in value]
        parts = [_plain(p) for p in _split_list(evidence)]
        return parts == [_plain(str(v)) for v in value]
    return False


# A number written before its unit ("7pm", "10km", "5-year", "3rd"): it says that number,
# though code does not confirm a value from it (the unit may be what was meant). The
# left side is as strict as _NUMBER_TOKEN's, so the 101 of "T-101" is still no number.
_NUMBER_BEFORE_UNIT = re.compile(r"(?<![\w.,+\-/:\u2212\u2013\u2014])(?:" + _NUMBER.pattern
                                 + r")(?=(?:-?[^\W\d_]+)+(?![\w\-]))")


def _expressed(quote: str) -> list[int | Fraction]:
    """Every number a word of ``quote`` says: what :func:`number_in` reads, and a
    number written before its unit."""
    found = number_in(quote)
    for m in _NUMBER_BEFORE_UNIT.finditer(quote):
        try:
            value = _exact(m.group(0))
        except (ValueError, ZeroDivisionError):
            continue
        if m.group(0)[0] not in "+-" and _NEGATIVE_WORD.search(quote, 0, m.start()):
            value = -value
        found.append(value)
    return found


def _words_marked(text: str, loose: bool) -> str:
    """``text`` case-folded, its spacing (and with ``loose``, "_" and "-") made one
    space, and every word between \\x01 and \\x02: a needle marked so matches a
    haystack marked so only where the needle's edge words are whole words there. A
    hyphen joins a word (the "T" and the "101" of "T-101" are not words of it)."""
    flat = re.sub(r"[\s_\-]+" if loose else r"\s+", " ", text.casefold())
    return re.sub(r"\w+(?:-\w+)*", lambda m: f"\x01{m.group(0)}\x02", flat)


def _shown(text: str, message: str, *, loose: bool) -> bool:
    """``text`` is in ``message`` as whole words, whatever the case and spacing; with
    ``loose``, "_" and "-" count as spaces (an enum member "window_seat" is named by
    "window seat")."""
    needle = _words_marked(text, loose).strip()
    # One str.find over marked text, not a search that checks each place a value
    # occurs: "aaa...a" inside a long word would cost length x length.
    return bool(needle) and _words_marked(message, loose).find(needle) >= 0


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _no_ground(value: Any, quote: str, message: str, member: bool) -> str | None:
    if value is None or isinstance(value, bool):
        return None  # a yes/no has no word to find: verify's verdict stands for it
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{_show(value)} is not a number a message can say"
        exact = _exact(repr(value)) if isinstance(value, float) else value
        if quote and quote in message and exact in _expressed(quote):
            return None
        return f"no word of its quote {_show(quote)} says {_show(value)}"
    if isinstance(value, str):
        if _shown(value, message, loose=member):
            return None
        return f"{_show(value)} is not in the message"
    if isinstance(value, list):
        for item in value:
            why = _no_ground(item, quote, message, member)
            if why is not None:
                return why
        return None
    if isinstance(value, dict):  # the values are what the message must show; the keys are the schema's
        for item in value.values():
            why = _no_ground(item, quote, message, False)
            if why is not None:
                return why
        return None
    return f"{_show(value)} is not a value code can find in a message"


def ungrounded(value: Any, evidence: str, message: str, param: Param) -> str | None:
    """Why ``value`` has no ground in ``message``, or None when code can see it there:
    a text is in the message (whole words, any case and spacing; an enum member also
    with "_" or "-" for a space), a number is said by a word of its quote ``evidence``
    (in digits, in words, or before its unit, with its sign: never the 101 of "T-101"),
    and a list or an object is grounded when each of its values is. A yes/no is
    grounded by any quote. Weaker than :func:`supports`: a grounded value may still be
    wrong (verify decides), but a value without ground is one model's word alone."""
    return _no_ground(value, evidence, message, param.enum is not None)
