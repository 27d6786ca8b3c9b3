"""Set one value in a TOML settings file in place: every other byte stays as it was.

The config file is TOML with one table per group (``[chat]``, then ``analysis_workers =
3``), written by hand or by ``boundctx config set``. Setting a key changes only that key's
value (its spelling, the spaces around ``=`` and a comment after the value stay); a new
key goes after the last key of its table, and a new table at the end of the file. Every
comment, blank line and key order is kept.

TOML itself cuts the file into statements: from a line, the shortest run of whole lines
that ``tomllib`` reads on its own is one statement (a key and its value, which may span
lines; a table header; a comment or a blank line). What cannot be placed for certain (a
value inside an inline table, an array of tables, a key spelt in a form not handled here)
is refused, and every edit is read back before it is kept: the new text must hold the
old settings with only the one key changed, or nothing is written.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["CannotEditInPlace", "render", "set_value"]


class CannotEditInPlace(ValueError):
    """The change cannot be made by changing only the key's own lines; the message says why."""


_SIMPLE_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
# indent, the key as written (dotted or not), the "=" with its spaces; the value follows.
_KEY_LINE = re.compile(rf"([ \t]*)({_SIMPLE_KEY}(?:[ \t]*\.[ \t]*{_SIMPLE_KEY})*)([ \t]*=[ \t]*)")
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')


class _Statement(NamedTuple):
    first: int  # its first line
    end: int  # the line after its last
    kind: str  # "blank" (comments, blank lines), "table", "header" (any other header), "key", "other"
    path: tuple[str, ...]  # a table: its name; a key: table + key
    value_at: int  # a key: where its value starts in the statement's text
    data: dict[str, Any]  # what tomllib reads from the statement alone


def render(value: bool | int | float | str) -> str:
    """``value`` as a TOML value: a basic string escapes quotes, backslashes and every
    control character TOML does not allow raw (DEL included)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no TOML form a setting may take")
        return repr(value)
    value.encode("utf-8")  # a lone surrogate (undecodable bytes in argv) raises here
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04X}", value) + '"'


def _path(data: Any) -> tuple[tuple[str, ...], Any]:
    """The keys down a chain of one-key tables, and what is at the end of it."""
    path: list[str] = []
    while isinstance(data, dict) and len(data) == 1:
        (key, data), = data.items()
        path.append(key)
    return tuple(path), data


def _statements(lines: list[str]) -> list[_Statement]:
    out: list[_Statement] = []
    table: tuple[str, ...] | None = ()  # None: under a header that is no plain table ("other" keys)
    i = 0
    while i < len(lines):
        j = i + 1
        while True:
            text = "".join(lines[i:j])
            try:
                data = tomllib.loads(text)
                break
            except tomllib.TOMLDecodeError:
                if j == len(lines):
                    raise CannotEditInPlace(f"line {i + 1} does not read as TOML on its own") from None
                j += 1
        head = text.lstrip(" \t")
        kind, value_at = "other", 0
        path: tuple[str, ...] = ()
        if not data:
            kind = "blank"
        elif head.startswith("[["):
            kind, table = "header", None
        elif head.startswith("["):
            path, end = _path(data)
            table = path if end == {} else None
            kind = "table" if table is not None else "header"
        elif table is not None and (m := _KEY_LINE.match(text)):
            key, _ = _path(tomllib.loads(m[2] + " = 0"))
            kind, path, value_at = "key", table + key, m.end()
        out.append(_Statement(i, j, kind, path, value_at, data))
        i = j
    return out


def _value_end(text: str, st: _Statement) -> int:
    """Where the statement's value ends: before the spaces and comment after it."""
    for at in (m.start() for m in re.finditer("#", text) if m.start() >= st.value_at):
        try:
            if tomllib.loads(text[:at]) == st.data:
                return len(text[:at].rstrip(" \t"))
        except tomllib.TOMLDecodeError:
            continue
    return len(text.rstrip(" \t\r\n"))


def _flat(data: Mapping[str, Any]) -> dict[str, tuple[type, Any]]:
    return {f"{group}.{key}": (type(value), value) for group, table in data.items()
            if isinstance(table, dict) for key, value in table.items()}


def set_value(text: str, group: str, key: str, value: bool | int | float | str) -> str:
    """``text`` (a settings file that reads as TOML) with ``[group] key`` set to ``value``,
    changing nothing else.

    Raises
    ------
    CannotEditInPlace
        The key is where only a wider rewrite could change it (an inline table, an array
        of tables), or the edited text would not read back as the same settings with
        this one changed.
    """
    old = tomllib.loads(text)
    lines = _LINES.findall(text)
    nl = "\r\n" if (lines and lines[0].endswith("\r\n")) else "\n"
    statements = _statements(lines)
    name = (group, key)
    rendered = render(value)

    def after(st_end: int, insert: str) -> str:
        before = "".join(lines[:st_end])
        if before and not before.endswith("\n"):
            before += nl
        return before + insert + "".join(lines[st_end:])

    hits = [st for st in statements if st.kind == "key" and st.path == name]
    if hits:
        st = hits[0]
        stext = "".join(lines[st.first:st.end])
        edited = stext[:st.value_at] + rendered + stext[_value_end(stext, st):]
        new = "".join(lines[:st.first]) + edited + "".join(lines[st.end:])
    else:
        if any(st.path == (group,) for st in statements if st.kind == "key"):
            raise CannotEditInPlace(f"[{group}] is written as an inline table ({group} = {{ ... }})")
        tables = [n for n, st in enumerate(statements) if st.kind == "table" and st.path == (group,)]
        root = next((n for n, st in enumerate(statements) if st.kind in ("table", "header")), len(statements))
        dotted = [st for st in statements[:root] if st.kind == "key" and st.path[:1] == (group,)]
        if tables:
            n = tables[0]
            last = statements[n]
            for st in statements[n + 1:]:
                if st.kind in ("table", "header"):
                    break
                if st.kind == "key":
                    last = st
            indent = _indent(lines[last.first]) if last.kind == "key" else ""
            new = after(last.end, f"{indent}{_bare(key)} = {rendered}{nl}")
        elif dotted:
            last = dotted[-1]
            indent = _indent(lines[last.first])
            new = after(last.end, f"{indent}{_bare(group)}.{_bare(key)} = {rendered}{nl}")
        else:
            lead = text
            if lead and not lead.endswith("\n"):
                lead += nl
            if lead.strip() and not lead.endswith(nl + nl):
                lead += nl
            new = lead + f"[{_bare(group)}]{nl}{_bare(key)} = {rendered}{nl}"
    want = _flat(old)
    want[f"{group}.{key}"] = (type(value), value)
    try:
        got = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise CannotEditInPlace(f"the edited file would not read as TOML ({exc})") from None
    if _flat(got) != want or set(got) != {*old, group}:
        raise CannotEditInPlace("the edited file would not read back as the same settings with only this one changed")
    return new


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def _bare(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else render(key)
