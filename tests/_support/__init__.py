"""What the tests share across folders, and what the benchmarks borrow from them.

The repository root is on ``sys.path`` by declaration (pytest's ``pythonpath``; the
benchmarks run as ``python -m bench.<script>`` from the root), so this is the package
``tests._support``:

- here: small checks and file helpers (``write_lines``, ``assert_well_formed``,
  ``notes_text``, ...) and :func:`importable_env` for child processes;
- ``servers``: a scripted OpenAI-compatible HTTP server and llama-cpp-python's real one;
- ``llama_server_double``: a stand-in for llama.cpp's llama-server (tokenize, templates);
- ``scripted``: the scripted model, settings and client the serve and web tests share;
- ``running``: a real boundctx serve on loopback in a thread;
- ``scripted_server``: the same serve in a process of its own (``python -m``);
- ``booking``, ``oracle``: the understanding tests' catalog and scripted model;
- ``strategies``: the hypothesis strategies;
- ``chromium``: where the browser tests find a Chromium;
- ``postgres``: a throwaway PostgreSQL server the suite starts itself (its fixtures,
  ``postgres_server`` and ``postgres_db``, are in ``tests/conftest.py``).

The slow twins stay in ``tests/reference/`` (``tests.reference.<module>``).
"""

import json
import os
import pathlib

#: The repository root: what must be on ``sys.path`` for ``tests.*`` to import.
ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The read-only data shared beside the clone (real sessions): the tests skip without it.
SHARED_DATA = ROOT.parent / "shared" / "data"


def importable_env(env=None) -> dict:
    """``env`` (default: this process's environment) with the repository root first on
    ``PYTHONPATH``: for a child Python process that imports ``tests.*``."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def eventually(check, *, within: float = 30.0):
    """``check()``'s first true value, asked again every 50 ms until ``within`` seconds
    pass (then its last value): for what another thread or process does in its own time."""
    import time

    deadline = time.monotonic() + within
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


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


def without_notice(content: str) -> str:
    """A message's text without the notice of the earlier messages that opens the kept
    history when older ones are left out (decision 0046): ``(N earlier messages ...)``."""
    import re
    return re.sub(r"^\(\d+ earlier messages of this conversation are not shown[^)]*\)\n\n", "", content)


def rewound_session(old: int = 6, fork_after: int = 1, new: int = 2, *, old_text: str = "old turn {k}",
                    new_text: str = "new turn {k}", header: bool = True) -> list[dict]:
    """A pi session rewound once: messages m0..m{old-1} (alternating user, assistant),
    then n{fork_after+1}.. forking after m{fork_after}, ``new`` of them; ``{k}`` in the
    texts is the message's place on its branch."""
    records: list[dict] = [{"type": "session", "version": 3, "id": "s"}] if header else []
    parent = None
    for k in range(old):
        records.append({"type": "message", "id": f"m{k}", "parentId": parent,
                        "message": {"role": "user" if k % 2 == 0 else "assistant",
                                    "content": old_text.format(k=k)}})
        parent = f"m{k}"
    parent = f"m{fork_after}"
    for k in range(fork_after + 1, fork_after + 1 + new):
        records.append({"type": "message", "id": f"n{k}", "parentId": parent,
                        "message": {"role": "user" if k % 2 == 0 else "assistant",
                                    "content": new_text.format(k=k)}})
        parent = f"n{k}"
    return records
