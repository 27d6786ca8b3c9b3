"""llama.cpp's own log as Python log records on ``boundctx.llama_cpp``, never on stderr.

llama.cpp and ggml print through one process-wide callback. llama-cpp-python installs
a printer (``llama_cpp/_logger.py``) that writes to stderr whatever its ``verbose``
level lets through, and it reads the levels of an older ggml: llama.cpp's warnings
count as errors there, so the vocabulary-only load prints ``n_ctx_seq (512) >
n_ctx_train (0) -- possible training context overflow`` on every local command.
:func:`route_llama_log` replaces that printer, once per process, with one that makes
each line a :mod:`logging` record at its own level; whoever configures logging decides
what is shown (the CLI: nothing below ERROR unless ``-vv``).
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import threading
from typing import Any

__all__ = ["LOGGER_NAME", "expect_abort", "route_llama_log"]

LOGGER_NAME = "boundctx.llama_cpp"

_logger = logging.getLogger(LOGGER_NAME)
# Without any handler, logging's last resort prints warnings on stderr: the very lines
# this module exists to keep off it unless an application asks for them.
_logger.addHandler(logging.NullHandler())

# enum ggml_log_level in the ggml that llama-cpp-python 0.3.36 vendors (ggml.h).
_NONE, _DEBUG, _INFO, _WARN, _ERROR, _CONT = range(6)
_LEVELS = {_NONE: logging.INFO, _DEBUG: logging.DEBUG, _INFO: logging.INFO, _WARN: logging.WARNING,
           _ERROR: logging.ERROR}


_thread = threading.local()


def expect_abort(expected: bool) -> None:
    """Say that this thread's ``llama_decode`` is being aborted on purpose (a cancel or
    a time limit, through the abort callback), or no longer is. Meanwhile the errors
    llama.cpp logs about it (``llama_decode: failed to decode, ret = 2``, ...) are
    DEBUG records: they report what was asked for, not a failure."""
    _thread.aborting = expected


class _Lines:
    """Joins the pieces llama.cpp prints (a line may come in several calls, the later
    ones at level CONT) and logs each complete line once, at its first piece's level."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = bytearray()
        self._level = logging.INFO
        self.enabled = True

    def take(self, level: int, text: bytes) -> None:
        if not self.enabled:
            return
        with self._lock:
            if level != _CONT:
                if self._pending:  # a new message: what the last one left unfinished is a line
                    self._emit(bytes(self._pending))
                    self._pending.clear()
                self._level = _LEVELS.get(level, logging.INFO)
            self._pending += text
            *lines, rest = bytes(self._pending).split(b"\n")
            self._pending[:] = rest
            for line in lines:
                self._emit(line)

    def _emit(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            _logger.log(logging.DEBUG if getattr(_thread, "aborting", False) else self._level, "%s", text)


_lines = _Lines()
_callback: Any = None  # the ctypes function llama.cpp calls; kept alive for the process
_installed = threading.Lock()


def _on_log(level: int, text: bytes | None, _user_data: Any) -> None:
    try:
        _lines.take(level, text or b"")
    except Exception:  # noqa: BLE001 - an exception cannot cross into C; a lost log line is all it costs
        pass


@atexit.register
def _stop() -> None:
    # Models freed during interpreter shutdown still log; logging may be gone by then.
    _lines.enabled = False


def route_llama_log(llama_cpp: Any) -> None:
    """Send llama.cpp's log to the ``boundctx.llama_cpp`` logger instead of stderr
    (idempotent; call it right after importing ``llama_cpp``, before loading a model)."""
    global _callback
    with _installed:
        if _callback is None:
            _callback = llama_cpp.llama_log_callback(_on_log)
            llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
