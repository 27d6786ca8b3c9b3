"""Package-level promises: exports, no silent slow paths, native imports only from the shell."""

import pathlib
import re
import subprocess
import sys

import pytest

import boundctx

PKG = pathlib.Path(boundctx.__file__).resolve().parent


def test_the_front_door_lists_what_a_user_imports():
    # The whole list, compared: a name added to or dropped from the front door is a
    # decision, made here too.
    assert sorted(boundctx.__all__) == sorted([
        "Engine", "AnalysisProgress", "Done", "Failed", "Fitted", "ReplyDelta", "ToolCall",
        "ToolResult", "Catalog", "Understander", "Provider", "ScriptedProvider",
        "LlamaCppProvider", "OpenAICompatibleProvider", "Entry", "History", "LineKind",
        "Transcript", "Window", "reindex", "config", "BoundctxError", "PartialHistoryRewrite",
        "TranscriptChanged", "TranscriptCorrupt", "TranscriptError", "TranscriptLocked",
        "TranscriptNotFound"])
    for name in boundctx.__all__:
        assert getattr(boundctx, name) is not None, name
    assert boundctx.Transcript.__module__ == "boundctx.transcript.store"
    assert boundctx.config.__name__ == "boundctx.config"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        boundctx.nothing_here  # noqa: B018


def test_the_version_is_the_one_pyproject_declares():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    pyproject = PKG.parent.parent / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("an installed copy without its pyproject.toml")
    assert boundctx.__version__ == tomllib.loads(pyproject.read_text())["project"]["version"]


@pytest.mark.parametrize("name", ["filescan", "lineindex", "sections", "tokenmap"])
def test_a_missing_compiled_module_is_an_import_error_that_says_what_to_do(name):
    # As if the extension had not been built: the import finds no module of that name.
    code = ("import sys\n"
            "class Hide:\n"
            "    def find_spec(self, fullname, path=None, target=None):\n"
            f"        if fullname == 'boundctx._native.{name}':\n"
            "            raise ModuleNotFoundError(fullname, name=fullname)\n"
            "sys.meta_path.insert(0, Hide())\n"
            f"from boundctx._native import {name}\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "ImportError" in run.stderr and "must be installed with its extensions built" in run.stderr, run.stderr
    assert f"boundctx._native.{name}" in run.stderr


def test_the_shell_imports_the_compiled_modules_by_name():
    # Static imports, so the .pyi stubs type the shell (no importlib indirection at the
    # call sites).
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"import_module\(f?[\"']boundctx\._native"
                             r"|\bload\([\"'](lineindex|sections|tokenmap)", text) \
            or path == PKG / "_native" / "__init__.py", path


def test_only_the_python_shell_imports_the_native_modules():
    # Tests and benchmarks may; inside the package, only boundctx/**.py, never _native
    # importing the shell back.
    native_src = PKG.parent.parent / "native"
    if native_src.exists():
        for pyx in native_src.rglob("*.pyx"):
            text = pyx.read_text()
            assert not re.search(r"^\s*(from|import)\s+boundctx(?!\._native|\.errors)", text, re.M), pyx


def test_errors_module_is_a_leaf():
    text = (PKG / "errors.py").read_text()
    assert not re.search(r"^\s*(from|import)\s+boundctx", text, re.M)


def test_errors_inherit_the_matching_builtin():
    from boundctx import errors

    assert issubclass(errors.TranscriptNotFound, FileNotFoundError)
    assert issubclass(errors.TranscriptCorrupt, ValueError)
    assert issubclass(errors.PartialHistoryRewrite, ValueError)
    assert issubclass(errors.TranscriptLocked, BlockingIOError)
    assert issubclass(errors.ServerUnreachable, ConnectionError)
    assert issubclass(errors.ServerTimeout, TimeoutError)
    assert issubclass(errors.TooManySections, ValueError)
    assert issubclass(errors.PromptTemplateError, ValueError)
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, Warning if name.endswith("Warning") else errors.BoundctxError), name


def test_the_error_tree_in_the_docstring_is_the_classes_own():
    # Each drawn line "Name(Builtin)" under its parent is a class with exactly those
    # bases, and every error class is drawn.
    from boundctx import errors

    drawn = {}
    stack: list[tuple[int, str]] = []
    for line in errors.__doc__.splitlines():
        if line.strip() == "BoundctxError":
            stack = [(0, "BoundctxError")]
            drawn["BoundctxError"] = (None, None)
            continue
        m = re.match(r"^[\s│]*[├└]── (\w+)(?:\((\w+)\))?(?:\s{2,}.*)?$", line)
        if not m:
            continue
        depth = line.index("──")
        name, builtin = m.group(1), m.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        drawn[name] = (stack[-1][1], builtin)
        stack.append((depth, name))
    classes = {name: getattr(errors, name) for name in errors.__all__
               if not name.endswith("Warning")}
    assert set(drawn) == set(classes)
    for name, (parent, builtin) in drawn.items():
        bases = tuple(b.__name__ for b in classes[name].__bases__)
        want = () if parent is None else (parent,) + ((builtin,) if builtin else ())
        assert bases == (want or ("Exception",)), (name, bases, want)


def test_closed_sets_are_types_that_refuse_other_values():
    # A value outside a closed set does not decode: the sets are the types.
    import typing

    import msgspec

    from boundctx import config, events

    assert typing.get_args(events.Phase) == ("reading", "noted", "done")
    assert set(typing.get_args(events.FinishReason)) == {
        "stop", "length", "repetition", "cancelled", "tool_rounds_exhausted", "tool_calls",
        "content_filter"}
    # Every way a model call can end is a way a reply can end.
    from boundctx.providers.base import FinishReason as CallReason

    assert set(typing.get_args(CallReason)) <= set(typing.get_args(events.FinishReason))
    assert {k.type for k in config.KEYS.values()} <= set(typing.get_args(config.KeyType))
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"type":"done","finish_reason":"bored"}', type=events.Event)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"type":"analysis_progress","section":1,"sections":2,"worker":0,'
                            b'"phase":"planned"}', type=events.Event)
    done = msgspec.json.decode(b'{"type":"done","finish_reason":"tool_calls"}', type=events.Event)
    assert done == events.Done("tool_calls")
