"""Compiled hot paths of boundctx (built from ``native/boundctx/_native/*.pyx``).

Only modules under ``boundctx`` import from here. A missing compiled module is an
``ImportError`` that says how to build it: boundctx has no silent pure-Python fallback.
"""

import importlib

__all__ = ["load"]


def load(name: str):
    """Import ``boundctx._native.<name>`` or raise an ImportError that says what to do."""
    try:
        return importlib.import_module(f"boundctx._native.{name}")
    except ImportError as exc:
        raise ImportError(
            f"boundctx's compiled module 'boundctx._native.{name}' is missing or does not "
            f"load ({exc}). boundctx must be installed with its extensions built: run "
            "'pip install .' from a checkout (or 'pip install boundctx'); an editable "
            "install needs 'pip install --no-build-isolation -e .' with cython, "
            "cython-cmake and scikit-build-core installed."
        ) from exc
