"""docs/map.md, the newcomer's map, names every module: each ``.py`` of the package by its
path under ``pyshell/boundctx/`` and each ``.pyx`` of the compiled core by its path under
``native/boundctx/_native/``, the two roots the map says its paths are under. Package
``__init__.py`` and ``__main__.py`` files are left to the map's judgement."""

import re

from tests._support import ROOT

MAP = ROOT / "docs" / "map.md"
PACKAGE = ROOT / "pyshell" / "boundctx"
NATIVE = ROOT / "native" / "boundctx" / "_native"


def modules() -> list[str]:
    py = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    pyx = [p.relative_to(NATIVE) for p in NATIVE.rglob("*.pyx")]
    return sorted(p.as_posix() for p in py + pyx)


def rows(text: str) -> list[str]:
    """The path each table row of the map is about: its first cell's first code span."""
    return [m[1] for m in re.finditer(r"(?m)^\| `([^`]+)`", text)]


def test_every_module_is_in_the_map_by_its_path():
    named = set(re.findall(r"`([^`\s]+)`", MAP.read_text()))
    assert modules(), "no modules found: the paths of this test are wrong"
    missing = [m for m in modules() if m not in named]
    assert not missing, f"docs/map.md does not name {missing}: add a row saying what each owns"


def test_no_module_has_two_rows():
    listed = rows(MAP.read_text())
    twice = sorted({r for r in listed if listed.count(r) > 1 and r in modules()})
    assert not twice, f"docs/map.md has more than one row for {twice}"
