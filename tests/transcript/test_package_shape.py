"""The transcript package's shape: kinds through one enum, one way of reading."""

import pathlib
import re

import boundctx
from boundctx._native import lineindex
from boundctx.transcript.kinds import DEFAULT_CLASSIFY_WINDOW, SEQUENCE_KINDS, LineKind

PKG = pathlib.Path(boundctx.__file__).resolve().parent


def test_line_kinds_are_the_native_numbering():
    # The numbering is written into every sidecar: the enum and the native core agree.
    assert {k.name: int(k) for k in LineKind} == {
        name: getattr(lineindex, name) for name in ("MESSAGE", "COMPACTION", "OTHER", "CORRUPT",
                                                    "BLANK", "UNDECIDED")}
    assert DEFAULT_CLASSIFY_WINDOW == lineindex.DEFAULT_CLASSIFY_WINDOW
    assert SEQUENCE_KINDS == (LineKind.MESSAGE, LineKind.CORRUPT)


def test_the_shell_names_line_kinds_only_through_the_enum():
    raw = re.compile(r"\blineindex\.(MESSAGE|COMPACTION|OTHER|CORRUPT|BLANK|UNDECIDED)\b")
    for path in PKG.rglob("*.py"):
        assert not raw.search(path.read_text()), path


def test_reading_never_changes_the_layout():
    # The reader reports what it learns; only the Transcript changes its layout.
    text = (PKG / "transcript" / "reading.py").read_text()
    assert not re.search(r"self\.layout\.\w+\s*(\|=|=[^=]|\.add\(|\.update\()", text)
    assert not re.search(r"layout\.(known_bad|bad_dirty|outcome)\s*(\|=|=[^=])", text)
