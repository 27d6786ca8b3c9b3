"""Package-level promises: exports, no silent slow paths, native imports only from the shell."""

import pathlib
import re

import pytest

import boundctx
from boundctx._native import load

PKG = pathlib.Path(boundctx.__file__).resolve().parent


def test_public_names_are_exported_and_exist():
    for name in boundctx.__all__:
        assert hasattr(boundctx, name), name


def test_a_missing_compiled_module_is_an_import_error_that_says_what_to_do():
    with pytest.raises(ImportError, match="must be installed with its extensions built"):
        load("no_such_module")


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
