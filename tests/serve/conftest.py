"""The serve tests need the serve extra; the ``serve`` fixture (a real server on
loopback) is in tests/conftest.py, shared with the browser tests."""

import pytest

pytest.importorskip("starlette", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")
pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")
