"""Small helpers shared by the tests."""

import os
import pathlib


def write_lines(path, lines, *, newline=b"\n", trailing=True) -> pathlib.Path:
    data = newline.join(l if isinstance(l, bytes) else l.encode() for l in lines)
    if trailing and lines:
        data += newline
    pathlib.Path(path).write_bytes(data)
    return pathlib.Path(path)


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
