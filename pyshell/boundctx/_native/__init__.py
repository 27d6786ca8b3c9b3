"""Compiled hot paths of boundctx (built from ``native/boundctx/_native/*.pyx``).

Shell modules import them by name (``from boundctx._native import lineindex``), so type
checkers read the ``.pyi`` stubs beside this file, and each is loaded only when first
imported. Only modules under ``boundctx`` import from here. A missing compiled module is
an ``ImportError`` that says how to build it: boundctx has no silent pure-Python
fallback.
"""

import importlib

__all__ = ["filescan", "lineindex", "linetree", "projection", "sections", "tokenmap"]

#: Compiled modules: filescan (reading a file into the line index, on threads),
#: lineindex (framing and classification of JSONL), projection (the display projection
#: of one line, and the line-separator escape), sections (the cut rule of the section
#: planner), tokenmap (token offsets in text).
MODULES = frozenset(__all__)


def how_to_build(name: str, cause: object) -> str:
    """The message of a missing or broken compiled module."""
    return (
        f"boundctx's compiled module 'boundctx._native.{name}' is missing or does not "
        f"load ({cause}). boundctx must be installed with its extensions built: run "
        "'pip install .' from a checkout (or 'pip install boundctx'); an editable "
        "install needs 'pip install --no-build-isolation -e .' with cython, "
        "cython-cmake and scikit-build-core installed."
    )


def __getattr__(name: str):
    # `from boundctx._native import X` asks the package for X first; the first time, X
    # is imported here, and any failure to load it says how to build it.
    if name in MODULES:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ImportError as exc:
            raise ImportError(how_to_build(name, exc), name=f"{__name__}.{name}") from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
