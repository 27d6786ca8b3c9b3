"""The transcript package's shape: kinds through one enum, no import circle, one way."""

import ast
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


def _package_imports(path: pathlib.Path) -> set[str]:
    """The boundctx modules a module imports at import time (not inside functions)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("boundctx"):
            found.add(node.module)
            for alias in node.names:  # `from boundctx.transcript import store`
                found.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("boundctx"))
    return found


def test_no_module_of_the_package_imports_itself_back_in_a_circle():
    modules = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path
    graph = {name: {m for m in _package_imports(path) if m in modules and m != name}
             for name, path in modules.items()}
    # A package's __init__ importing its own submodules is not a circle of the code.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".") or m not in modules
                       or modules[m].name != "__init__.py"}
    done, on_path = set(), []

    def visit(node):
        if node in on_path:
            raise AssertionError("import circle: " + " -> ".join(on_path[on_path.index(node):] + [node]))
        if node in done:
            return
        on_path.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        on_path.pop()
        done.add(node)

    for name in sorted(graph):
        visit(name)


def test_reading_never_changes_the_layout():
    # The reader reports what it learns; only the Transcript changes its layout.
    text = (PKG / "transcript" / "reading.py").read_text()
    assert not re.search(r"self\.layout\.\w+\s*(\|=|=[^=]|\.add\(|\.update\()", text)
    assert not re.search(r"layout\.(known_bad|bad_dirty|outcome)\s*(\|=|=[^=])", text)
