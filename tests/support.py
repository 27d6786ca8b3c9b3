"""Small helpers shared by the tests."""

import json
import os
import pathlib


def write_lines(path, lines, *, newline=b"\n", trailing=True) -> pathlib.Path:
    data = newline.join(line if isinstance(line, bytes) else line.encode() for line in lines)
    if trailing and lines:
        data += newline
    pathlib.Path(path).write_bytes(data)
    return pathlib.Path(path)


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def assert_well_formed(messages, *, json_arguments=True):
    """What every chat API accepts: known roles, text content, each tool result after
    the call it answers (and, with ``json_arguments``, call arguments that are JSON)."""
    called = set()
    for m in messages:
        assert m["role"] in ("system", "user", "assistant", "tool")
        assert isinstance(m["content"], str)
        for call in m.get("tool_calls", []):
            called.add(call["id"])
            if json_arguments:
                json.loads(call["function"]["arguments"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in called


def special_input(tmp_path, special: str, name: str) -> tuple[str, str]:
    """(path, what boundctx should say of it) for a FIFO made in ``tmp_path`` under
    ``name`` or a device path such as ``/dev/zero``."""
    if special == "fifo":
        path = str(pathlib.Path(tmp_path) / name)
        os.mkfifo(path)
        return path, "is a FIFO (named pipe), not a regular file"
    return special, "is a character device, not a regular file"


#: What an analysed item becomes in the coordinator's prompt; its notes follow it in the
#: same message (decision 0031).
ANALYSED_MARK = "read completely by note-taking workers; see the notes on"


def notes_text(request) -> str:
    """The analysis notes a coordinator prompt carries, each in the place of the item it
    notes, joined in order ("" when nothing was analysed)."""
    return "\n\n".join(m["content"] for m in request.messages
                       if isinstance(m.get("content"), str) and ANALYSED_MARK in m["content"])
