"""The README is executable: every ```python block and every line of every ```sh block
runs as written.

Each runs in a temporary folder holding a copy of ``examples/`` and the files the
README's commands name but a fresh clone lacks (``big.log``, ``notes.txt``,
``session.jsonl``, ``chat.jsonl``, ``~/.pi/sessions``), made here the way a reader would
make them. Python blocks run in a fresh interpreter with ``-W error`` (as the suite's
``filterwarnings = error``); shell lines run in bash, their ``# comment`` tails dropped,
with ``HOME`` in the temporary folder and ``/tmp/`` paths moved into it, so nothing is
written into the repository, the user's files or the shared ``/tmp``.

What needs a real generation with the embedded model, or a gigabyte of data, is marked
slow. What is not run here at all is listed in ``NOT_RUN`` with its reason and shows up
as a skip. The blocks are found generically: a new example is run without touching this
file, and a command naming a file no fixture makes fails until one does.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from typing import NamedTuple

import pytest

from boundctx import Transcript
from boundctx.cli import main
from boundctx.transcript.chat import append_exchange

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHELL = {"sh", "bash", "shell"}
NOT_CODE = {"text", "toml", "json"}  # shown, not run

# Segments of a shell line (split at `&&`) that are not run here. Each is a skip.
NOT_RUN = [
    (r"^(?:\w+=(?:\"[^\"]*\"|\S+)\s+)*pip install\b",
     "installs into an environment: these tests run in the one the README's second set-up line "
     "makes, and CI runs that line and the checks build (.ci/run); the development install is "
     "run in a fresh venv by test_development_install_works_in_a_fresh_venv"),
    (r"\bpython -m pytest\b",
     "the test suite itself: CI runs it (.ci/run); run from a test it would recurse"),
    (r"^python -m bench\.",
     "a benchmark: minutes of work on up to 1 GiB in /tmp; its numbers are bench/RESULTS.md"),
    (r"postgresql://",
     "needs a PostgreSQL server at the address shown, which only its owner has: the same commands run "
     "against a real server the suite starts in tests/cli/test_session_transfer.py (import, export) and "
     "tests/serve/test_sessions_in_postgres.py (serve on a database)"),
    (r"^boundctx serve\b",
     "a server that runs until stopped: the examples that talk to it run against the same command "
     "started by this test (SERVED)"),
]
# Examples that talk to `boundctx serve` on its default address: the test starts the
# README's own serve command (the embedded model) for them, and stops it after.
SERVED = [(r"127\.0\.0\.1:8765", ["boundctx", "serve", "--n-ctx", "2048"])]
# Run, but only in the slow run: (pattern, reason).
SLOW = [
    (r"(^|\|\s*)boundctx (-\S+ )*(ask|plan)\b", "a real generation with the embedded model"),
    (r"127\.0\.0\.1:8765", "a real generation with the embedded model, through boundctx serve"),
    (r"^boundctx doctor\b(?!.*--no-generate)", "a real generation with the embedded model, in a child process"),
    (r"--size\s+[\d.]+\s*[gG]", "a gigabyte of generated data"),
    (r"\bLlamaCppProvider\(", "a real generation with the embedded model"),
]
# Modules an example needs: skipped where they are not installed, as the other tests do.
NEEDS = [
    (r"\bLlamaCounter\(|\bLlamaCppProvider\(|(^|\|\s*)boundctx (-\S+ )*(ask|plan|doctor)\b"
     r"|^boundctx split\b(?!.*--tokenizer)|127\.0\.0\.1:8765",
     "llama_cpp"),
    (r"127\.0\.0\.1:8765", "uvicorn"),
    (r"\bfrom openai import\b", "openai"),
    (r"\bTiktokenCounter\(|--tokenizer tiktoken", "tiktoken"),
]
# Exit statuses other than 0 that a line may end with: the embedded 135M model often
# cannot do the understanding tasks, and a plan that fails closed exits 1 by design
# (README, "Exit codes"). A traceback is a failure whatever the status.
# The embedded model's README answer may also be cut at its --max-tokens budget (exit 3:
# an incomplete answer, which the README shows the pipeline with, not the answer).
EXIT_OK = [(r"^boundctx plan\b", {0, 1}), (r"(^|\|\s*|&& )boundctx (-\S+ )*ask\b", {0, 3})]


class Block(NamedTuple):
    lang: str
    line: int  # README line of the block's first line of code
    code: str


class Case(NamedTuple):
    kind: str  # "python" or "sh"
    line: int
    code: str


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order."""
    blocks: list[Block] = []
    lang, start, body = None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if lang is None:
            if line.startswith("```"):
                lang, start, body = line[3:].strip(), number + 1, []
        elif line.strip() == "```":
            blocks.append(Block(lang, start, "".join(body_line + "\n" for body_line in body)))
            lang = None
        else:
            body.append(line)
    assert lang is None, f"README.md: the block opened before line {start} is never closed"
    return blocks


def _unquoted(line: str):
    """(index, character) of each character of a shell line outside quotes."""
    quote, escaped = None, False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        else:
            yield i, ch


def strip_comment(line: str) -> str:
    """A shell line without its ``# comment`` tail (a ``#`` that starts a word, outside quotes)."""
    for i, ch in _unquoted(line):
        if ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip()
    return line.strip()


def split_and(command: str) -> list[str]:
    """The commands of ``a && b && c``, split at each ``&&`` outside quotes."""
    cuts = [i for i, ch in _unquoted(command) if ch == "&" and command[i + 1:i + 2] == "&"]
    pieces, last = [], 0
    for i in cuts:
        pieces.append(command[last:i].strip())
        last = i + 2
    return [p for p in [*pieces, command[last:].strip()] if p]


def _match(rules, code: str) -> list:
    return [value for pattern, value in rules if re.search(pattern, code, re.MULTILINE)]


def readme_cases(text: str):
    """One pytest param per example: each Python block, each shell line (without the
    segments that are not run here, which are params of their own, skipped)."""
    for block in readme_blocks(text):
        if block.lang == "python":
            yield _param(Case("python", block.line, block.code))
        elif block.lang in SHELL:
            for offset, raw in enumerate(block.code.splitlines()):
                command = strip_comment(raw)
                if not command:
                    continue  # a comment continuing the line above
                line = block.line + offset
                run = []
                for segment in split_and(command):
                    reasons = _match(NOT_RUN, segment)
                    if reasons:
                        yield pytest.param(Case("sh", line, segment), id=_id(line, segment),
                                           marks=pytest.mark.skip(reason=f"not run here: {reasons[0]}"))
                    else:
                        run.append(segment)
                if run:
                    yield _param(Case("sh", line, " && ".join(run)))


def _id(line: int, code: str) -> str:
    first = next((code_line for code_line in code.splitlines()
                  if code_line.strip() and not code_line.startswith(("import", "from"))), code)
    return f"L{line}:{first.strip()[:48]}"


def _param(case: Case):
    slow = _match(SLOW, case.code)
    return pytest.param(case, id=_id(case.line, case.code), marks=[pytest.mark.slow] if slow else [])


CASES = list(readme_cases(README.read_text(encoding="utf-8")))


# -- the temporary folder the examples run in --------------------------------------------


@pytest.fixture(scope="session")
def _fixture_files(tmp_path_factory):
    """work/ (the examples' cwd), home/ (their HOME) and tmp/ (their /tmp), with the
    files the README names that a fresh clone does not have."""
    root = tmp_path_factory.mktemp("readme")
    work, home = root / "work", root / "home"
    (root / "tmp").mkdir()
    shutil.copytree(ROOT / "examples", work / "examples")
    shutil.copyfile(ROOT / "examples" / "build.log", work / "big.log")  # a log to ask about
    shutil.copyfile(ROOT / "examples" / "build.log", work / "notes.txt")  # a text to split
    assert main(["sample", str(work / "session.jsonl")]) == 0  # as a reader would make one
    (home / ".pi" / "sessions").mkdir(parents=True)
    shutil.copyfile(work / "session.jsonl", home / ".pi" / "sessions" / "session.jsonl")
    with Transcript.open(work / "chat.jsonl", create=True) as t:  # a conversation to continue
        append_exchange(t, "Which step failed?", "The integration tests step failed.", style="text",
                        parent_id=None)
    return root


@pytest.fixture
def sandbox(_fixture_files, tmp_path):
    """A fresh copy of the fixture folders for one example, removed after it (an
    example may write a gigabyte)."""
    root = tmp_path / "r"
    shutil.copytree(_fixture_files, root, symlinks=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def example_env(root: pathlib.Path) -> dict[str, str]:
    """The environment an example runs in: this interpreter's ``python`` and ``boundctx``
    first on PATH, HOME in the sandbox, warnings as errors. The suite's isolated
    BOUNDCTX_CONFIG and BOUNDCTX_CACHE_DIR (conftest) are inherited."""
    return {**os.environ, "HOME": str(root / "home"), "PYTHONWARNINGS": "error",
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def run_example(case: Case, root: pathlib.Path) -> subprocess.CompletedProcess:
    env = example_env(root)
    if case.kind == "python":
        script = root / f"readme_line_{case.line}.py"
        script.write_text(case.code, encoding="utf-8")
        argv = [sys.executable, "-W", "error", str(script)]
    else:
        # The README's /tmp paths go to the sandbox's tmp/: a second run, or another
        # engineer's, must not find the first one's files.
        command = re.sub(r"(?<![\w.~/-])/tmp/", str(root / "tmp") + "/", case.code)
        argv = ["bash", "-o", "pipefail", "-c", command]
    # No terminal input: a command that reads stdin gets end-of-file, not a hang.
    return subprocess.run(argv, cwd=root / "work", env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=3600)  # a hang guard, not a speed check


@contextlib.contextmanager
def serving(argv: list[str], root: pathlib.Path):
    """The README's serve command, running in the sandbox until the block ends."""
    server = subprocess.Popen(argv, cwd=root / "work", env=example_env(root), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if urllib.request.urlopen("http://127.0.0.1:8765/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{' '.join(argv)} did not start: {server.stderr.read()[-2000:]}")
            time.sleep(0.2)
        yield server
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
        server.stderr.close()


@pytest.mark.parametrize("case", CASES)
def test_readme_example_runs_as_written(case, sandbox):
    for module in _match(NEEDS, case.code):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install '.[test]')")
    with contextlib.ExitStack() as stack:
        for argv in _match(SERVED, case.code):
            stack.enter_context(serving(argv, sandbox))
        done = run_example(case, sandbox)
    allowed = set().union(*_match(EXIT_OK, case.code)) or {0}
    assert done.returncode in allowed and "Traceback (most recent call last)" not in done.stderr, (
        f"README.md line {case.line} exited {done.returncode} (expected {sorted(allowed)}):\n"
        f"{case.code}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


def test_the_readme_has_examples_and_only_kinds_the_runner_knows():
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    unknown = [(b.line, b.lang) for b in blocks if b.lang not in {"python", *SHELL, *NOT_CODE}]
    assert not unknown, (f"README blocks this test cannot run (line, language): {unknown}; label them "
                         f"python or sh, or add the language to this test")
    assert sum(b.lang == "python" for b in blocks) >= 1 and sum(b.lang in SHELL for b in blocks) >= 1
    assert len(CASES) >= 10


def test_every_config_file_the_readme_shows_is_one_boundctx_accepts(tmp_path):
    from boundctx import config

    shown = [b for b in readme_blocks(README.read_text(encoding="utf-8")) if b.lang == "toml"]
    assert shown, "the README shows no config file"
    for block in shown:
        path = tmp_path / f"line-{block.line}.toml"
        path.write_text(block.code, encoding="utf-8")
        settings = config.load(path=path, env={})  # an unknown key or a refused value raises here
        for group, table in tomllib.loads(block.code).items():
            for key in table:
                assert settings.source(f"{group}.{key}") == f"file {path}", (block.line, group, key)


def test_shell_lines_are_read_the_way_bash_reads_them():
    assert strip_comment('boundctx plan "Luigi\'s # not a comment" # a comment') == \
        'boundctx plan "Luigi\'s # not a comment"'
    assert strip_comment("   # only a comment") == ""
    assert strip_comment("echo a#b") == "echo a#b"
    assert split_and('pip install ".[x]" && boundctx ask "a && b"') == ['pip install ".[x]"', 'boundctx ask "a && b"']
    blocks = readme_blocks("text\n```sh\na\n\n# c\n```\n```python\nx = 1\n```\n")
    assert blocks == [Block("sh", 3, "a\n\n# c\n"), Block("python", 8, "x = 1\n")]


def test_a_broken_example_fails(sandbox):
    """The runner itself: an example that fails is reported, not passed over."""
    assert run_example(Case("python", 0, "print(text)\n"), sandbox).returncode != 0
    assert run_example(Case("sh", 0, "boundctx split missing.txt --tokenizer estimate"), sandbox).returncode == 2
    # and a line writing /tmp/... writes into the sandbox
    done = run_example(Case("sh", 0, "boundctx sample /tmp/x.jsonl --size 10k"), sandbox)
    assert done.returncode == 0 and (sandbox / "tmp" / "x.jsonl").exists()


def test_the_set_up_line_left_to_ci_is_the_one_ci_runs():
    # The README's test set-up line is not run here because CI runs it: hold CI to it.
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip("no .ci/run in this tree")
    first = next(b for b in readme_blocks(README.read_text(encoding="utf-8")) if b.lang in SHELL)
    left_to_ci = [strip_comment(line) for line in first.code.splitlines() if re.search(r"\bpython -m pytest\b", line)]
    ci_lines = {line.strip() for line in ci.read_text(encoding="utf-8").splitlines()}
    assert left_to_ci and all(line in ci_lines for line in left_to_ci), (left_to_ci, ci)


def test_both_set_up_lines_build_llama_cpp_without_what_boundctx_never_loads():
    """The two set-up lines give pip the same CMAKE_ARGS, which name a file of this
    tree by an absolute path (CMake takes CMAKE_PROJECT_<name>_INCLUDE relative to the
    build folder, which pip puts under /tmp), and that file turns llama.cpp's common
    library off; each line says how long the build takes before it starts."""
    block = next(b for b in readme_blocks(README.read_text(encoding="utf-8")) if b.lang in SHELL)
    lines = [strip_comment(line) for line in block.code.splitlines() if line.strip()][:2]
    args = set()
    for line in lines:
        segments = split_and(line)
        install = next(i for i, s in enumerate(segments) if re.search(r"\bpip install \"\.\[", s))
        assert any(re.match(r"echo .*minutes", s) for s in segments[:install]), line
        words = shlex.split(segments[install])
        assert words[0].startswith("CMAKE_ARGS="), line
        args.add(words[0])
    assert len(args) == 1, args
    # split as scikit-build-core splits CMAKE_ARGS: a checkout path with spaces stays one flag
    flags = shlex.split(args.pop().removeprefix("CMAKE_ARGS="))
    assert "-DLLAVA_BUILD=OFF" in flags
    include = next(f for f in flags if f.startswith("-DCMAKE_PROJECT_llama.cpp_INCLUDE="))
    path = include.partition("=")[2]
    assert path.startswith("$PWD/"), include
    lean = ROOT / path.removeprefix("$PWD/")
    assert re.search(r"^set\(LLAMA_BUILD_COMMON OFF\)$", lean.read_text(encoding="utf-8"), re.M), lean


# -- the development install --------------------------------------------------------------


def _dev_install_line() -> tuple[list[str], str]:
    """(the segments before the ``--no-build-isolation`` install, that install)."""
    for block in readme_blocks(README.read_text(encoding="utf-8")):
        if block.lang in SHELL:
            for raw in block.code.splitlines():
                segments = split_and(strip_comment(raw))
                for i, segment in enumerate(segments):
                    if "--no-build-isolation" in segment:
                        return segments[:i], segment
    pytest.fail("README.md has no `pip install --no-build-isolation` development install")


def test_development_install_installs_the_build_requirements_first():
    # --no-build-isolation builds with what is installed: the same line must install
    # every [build-system] requirement first, or a fresh venv cannot build.
    before, _ = _dev_install_line()
    installed = set()
    for segment in before:
        words = shlex.split(segment)
        if words[:2] == ["pip", "install"]:
            installed |= {w.replace(" ", "").lower() for w in words[2:] if not w.startswith("-")}
    with open(ROOT / "pyproject.toml", "rb") as f:
        required = {r.replace(" ", "").lower() for r in tomllib.load(f)["build-system"]["requires"]}
    assert required <= installed, f"the development install does not install {sorted(required - installed)} first"


@pytest.mark.slow
def test_development_install_works_in_a_fresh_venv(tmp_path):
    """The README's development install line, as written, in a new venv and a copy of
    this checkout (an editable install writes build/ into its source tree)."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to copy the source tree from")
    files = subprocess.run([git, "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    src = tmp_path / "src"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    before, install = _dev_install_line()
    line = " && ".join([*before, install])
    done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=src, env=env, capture_output=True,
                          text=True, timeout=3600)
    assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import boundctx, boundctx._native.lineindex; print(boundctx.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert pathlib.Path(check.stdout.strip()).is_relative_to(src)  # editable: the copy's source


# -- exit codes ---------------------------------------------------------------------------


def documented_exit_codes() -> dict[int, str]:
    """The README's "Exit codes" list: {code: what it says}."""
    text = README.read_text(encoding="utf-8")
    assert "### Exit codes" in text, "README.md has no 'Exit codes' section"
    section = re.split(r"^#", text.split("### Exit codes", 1)[1], maxsplit=1, flags=re.MULTILINE)[0]
    return {int(m[1]): m[2] for m in re.finditer(r"^- `(\d+)`: (.*)$", section, re.MULTILINE)}


def cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "boundctx", *map(str, args)], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)


def _interrupted_sample(tmp_path):
    from tests.cli.test_sample import start_sample

    proc = start_sample(tmp_path / "s.jsonl")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err.decode(errors="replace"))


def _failed_reply(tmp_path):
    from tests._support.servers import free_port

    return cli("ask", "--provider", "remote", "--base-url", f"http://127.0.0.1:{free_port()}", "hello", cwd=tmp_path)


def _session_get(tmp_path):
    assert main(["sample", str(tmp_path / "s.jsonl"), "--size", "50k"]) == 0
    return cli("session", "get", "s.jsonl", "--limit", "3", cwd=tmp_path)


def _sample_onto_a_file(tmp_path):
    (tmp_path / "s.jsonl").write_text("{}\n")
    return cli("sample", "s.jsonl", cwd=tmp_path)


def _serve_on_a_port_in_use(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        return cli("serve", "--port", taken.getsockname()[1], "--sessions-dir", tmp_path / "sessions",
                   "--provider", "remote", "--base-url", "http://127.0.0.1:9", "--model", "m", cwd=tmp_path)


def _cut_answer(tmp_path):
    from tests._support.servers import Scripted, delta

    server = Scripted([(200, [delta("The build failed at"), delta(finish="length")])])
    try:
        return cli("ask", "--provider", "remote", "--base-url", server.url, "--max-tokens", "5", "q", cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()


def _looping_answer(tmp_path):
    from tests._support.servers import Scripted, delta

    server = Scripted([(200, [delta("The build failed.\n"), *[delta("It failed again.\n")] * 12,
                              delta(finish="stop")])])
    try:
        return cli("ask", "--provider", "remote", "--base-url", server.url, "q", cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()


# One real case or more per documented code, run as a real `python -m boundctx` process.
EXIT_CASES = {
    0: {"session get": _session_get},
    1: {"reindex of a missing file": lambda p: cli("reindex", "missing.jsonl", cwd=p),
        "a failed reply": _failed_reply},
    2: {"argparse error": lambda p: cli("no-such-command", cwd=p),
        "split of a missing file": lambda p: cli("split", "missing.txt", "--tokenizer", "estimate", cwd=p),
        "sample onto a file without --force": _sample_onto_a_file,
        "an empty question": lambda p: cli("ask", " ", cwd=p),
        "serve on a port in use": _serve_on_a_port_in_use},
    3: {"an answer cut at its budget": _cut_answer, "an answer stopped in a loop": _looping_answer},
    130: {"sample interrupted": _interrupted_sample},
}


def test_the_readme_documents_every_exit_code_the_cli_has():
    assert set(documented_exit_codes()) == set(EXIT_CASES)


@pytest.mark.parametrize("code", sorted(EXIT_CASES))
def test_each_documented_exit_code_is_what_the_cli_returns(code, tmp_path):
    assert code in documented_exit_codes()
    for name, case in EXIT_CASES[code].items():
        folder = tmp_path / re.sub(r"\W+", "-", name)
        folder.mkdir()
        done = case(folder)
        assert done.returncode == code and "Traceback" not in done.stderr, (
            f"{name}: exit {done.returncode}, expected {code}\n{done.stderr[-2000:]}")
