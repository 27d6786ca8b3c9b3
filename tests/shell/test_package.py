"""Package-level promises: exports, no silent slow paths, native imports only from the shell."""

import pathlib
import re

import pytest

import boundctx
import subprocess
import sys

PKG = pathlib.Path(boundctx.__file__).resolve().parent


def test_public_names_are_exported_and_exist():
    for name in boundctx.__all__:
        assert hasattr(boundctx, name), name


@pytest.mark.parametrize("name", ["lineindex", "sections", "tokenmap"])
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
        assert not re.search(r"import_module\(f?[\"']boundctx\._native|\bload\([\"'](lineindex|sections|tokenmap)", text) \
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
