"""The package's import graph: no module imports itself back, through any chain of
imports made at import time."""

import ast
import pathlib

import boundctx

PKG = pathlib.Path(boundctx.__file__).resolve().parent


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
