"""``boundctx ask`` as used every day: piped input, what it says about dropped history
and cut replies, a status line that moves, Ctrl-C. Real processes against a scripted
OpenAI-compatible server on loopback."""

import json
import os
import pathlib
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from boundctx.cli import main

from tests._support.servers import delta


def _sse(*pieces, finish="stop"):
    return 200, [delta(p) if isinstance(p, str) else p for p in pieces] + [delta(finish=finish)]


def _ask(url, *args):
    return [sys.executable, "-m", "boundctx", "ask", "--provider", "remote", "--base-url", url, *args]


def _user_text(request):
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "user")


def test_piped_input_is_attached_as_stdin(scripted_server):
    server = scripted_server(_sse("It failed at step 3."), _sse("ok"))
    out = subprocess.run(_ask(server.url, "Which step failed?"), input=b"step 3: FAILED id=42\n",
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().strip() == "It failed at step 3."
    assert "File stdin:\nstep 3: FAILED id=42\n" in _user_text(server.requests[0])
    # --file - says so explicitly, beside a named file.
    out = subprocess.run(_ask(server.url, "--file", "-", "q"), input=b"from the pipe", capture_output=True,
                         timeout=60)
    assert out.returncode == 0 and "File stdin:\nfrom the pipe" in _user_text(server.requests[1])


def test_no_pipe_no_attachment(scripted_server):
    server = scripted_server(_sse("hi"))
    out = subprocess.run(_ask(server.url, "hello"), stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert out.returncode == 0 and _user_text(server.requests[0]) == "hello"


def _long_transcript(path, n):
    with open(path, "w") as f:
        for i in range(n):
            role = "user" if i % 2 == 0 else "assistant"
            f.write(json.dumps({"type": "message", "message": {"role": role, "content": f"m{i} " + "w " * 150}})
                    + "\n")


def test_history_left_out_to_fit_is_said_on_stderr_and_in_json(tmp_path, scripted_server, capsys):
    path = tmp_path / "chat.jsonl"
    _long_transcript(path, 100)
    server = scripted_server(_sse("fine"), _sse("fine"))
    args = ["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(path), "--no-save",
            "--history", "100", "--n-ctx", "2048", "now?"]
    assert main(args) == 0
    err = capsys.readouterr().err
    sent = len(server.requests[0]["messages"])
    assert sent < 101
    assert f"{101 - sent} oldest of 101 messages were left out to fit" in err
    assert main([*args[:-1], "--json", "now?"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[0]["type"] == "fitted" and events[0]["dropped"] == list(range(101 - sent))


def test_a_reply_cut_at_its_budget_says_so_and_exits_3_so_a_script_can_tell(scripted_server):
    server = scripted_server(_sse("The build failed at", finish="length"),
                             _sse("The build failed at", finish="length"), _sse("It failed at step 3."))
    out = subprocess.run(_ask(server.url, "--max-tokens", "5", "q"), stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    assert out.stdout == "The build failed at\n"  # what came is still shown
    assert "cut at its 5-token budget and is not complete" in out.stderr
    out = subprocess.run(_ask(server.url, "--json", "--max-tokens", "5", "q"), stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and json.loads(out.stdout.splitlines()[-1])["finish_reason"] == "length"
    out = subprocess.run(_ask(server.url, "q"), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr  # a complete answer


@pytest.mark.parametrize("question", ["", "   ", "\t\n"])
def test_an_empty_question_is_refused_before_any_model_call(scripted_server, question):
    server = scripted_server(_sse("hi"))
    out = subprocess.run(_ask(server.url, question), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert "boundctx ask: the question is empty" in out.stderr and "Traceback" not in out.stderr
    assert server.requests == []


@pytest.mark.parametrize("flags, said, kind", [
    (["--n-ctx", "5"], "chat.n_ctx = 5", "ConfigError"),
    (["--file", "missing.log"], "missing.log", "FileNotFoundError"),
    (["--max-tokens", "0"], "--max-tokens must be >= 1, got 0", "ValueError"),
    (["--transcript", "missing.jsonl", "--no-save"], "no transcript at 'missing.jsonl'", "FileNotFoundError"),
])
def test_with_json_an_error_before_the_reply_is_one_failed_event_on_stdout(tmp_path, scripted_server, flags, said,
                                                                          kind):
    server = scripted_server(_sse("hi"))
    argv = _ask(server.url, "--json", *flags, "q")
    out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2, out.stderr  # as without --json
    [line] = out.stdout.splitlines()
    event = json.loads(line)
    assert event["type"] == "failed" and said in event["error"] and event["kind"] == kind
    assert said in out.stderr and "Traceback" not in out.stderr
    plain = subprocess.run(argv[:argv.index("--json")] + argv[argv.index("--json") + 1:], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert plain.returncode == 2 and plain.stdout == "" and said in plain.stderr
    assert server.requests == []


def test_a_transcript_that_does_not_exist_is_started_and_said_so(tmp_path, scripted_server):
    path = tmp_path / "chat.jsonl"
    server = scripted_server(_sse("hello"), _sse("again"))
    out = subprocess.run(_ask(server.url, "--transcript", str(path), "hi"), stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if "new transcript" in line]
    assert said == [f"boundctx ask: {path} does not exist: a new transcript is started there"]
    assert path.exists()
    out = subprocess.run(_ask(server.url, "--transcript", str(path), "more"), stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "new transcript" not in out.stderr  # continued, not started


def test_quiet_prints_the_answer_and_nothing_else(tmp_path, scripted_server, capsys):
    path = tmp_path / "chat.jsonl"
    _long_transcript(path, 100)
    server = scripted_server(_sse("fine"))
    assert main(["ask", "-q", "--provider", "remote", "--base-url", server.url, "--transcript", str(path),
                 "--no-save", "--history", "100", "--n-ctx", "2048", "now?"]) == 0
    out = capsys.readouterr()
    assert out.out == "fine\n" and out.err == ""


def _run_in_pty(argv, *, until=None, on_match=None, timeout=60):
    """Run ``argv`` with stderr and stdout on a pseudo-terminal; returns (exit code,
    everything written). ``on_match(proc)`` is called once ``until`` appears."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    out = b""
    fired = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        if until and not fired and until in out:
            fired = True
            on_match(proc)
        if proc.poll() is not None and not ready:
            break
    os.close(leader)
    return proc.wait(timeout=10), out.decode(errors="replace")


def test_the_status_line_ticks_while_the_model_is_silent(scripted_server):
    server = scripted_server(_sse(2.0, "Done."))
    code, out = _run_in_pty(_ask(server.url, "q"))
    assert code == 0 and "Done." in out
    # Redrawn in place ("\r"), the step named, the seconds moving while nothing came back.
    seconds = {int(s) for s in re.findall(r"\ranswering · (\d+) s", out)}
    assert len(seconds) >= 2 and max(seconds) >= 1


def test_ctrl_c_stops_the_reply_and_says_it_is_not_complete(scripted_server):
    server = scripted_server(_sse("First words", *([0.5] * 40), "never sent"))
    code, out = _run_in_pty(_ask(server.url, "q"), until=b"First words",
                            on_match=lambda proc: proc.send_signal(signal.SIGINT))
    assert code == 130 and "never sent" not in out
    assert "stopping" in out and "not complete" in out


def test_the_api_key_comes_from_the_environment_unless_a_flag_gives_one(scripted_server, monkeypatch, capsys):
    server = scripted_server(_sse("a"), _sse("b"))
    monkeypatch.setenv("BOUNDCTX_API_KEY", "from-env")
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "q"]) == 0
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--api-key", "from-flag", "q"]) == 0
    assert [h.get("Authorization") for h in server.headers] == ["Bearer from-env", "Bearer from-flag"]


def test_temperature_and_system_prompt_flags_reach_the_request(scripted_server, capsys):
    server = scripted_server(_sse("a"))
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--temperature", "0",
                 "--system", "Answer in one word.", "q"]) == 0
    request = server.requests[0]
    assert request["temperature"] == 0
    assert request["messages"][0] == {"role": "system", "content": "Answer in one word."}


@pytest.mark.slow
def test_ctrl_c_while_the_local_model_reads_a_section_stops_the_reply(tmp_path):
    """The first section's prompt (~1,300 tokens) takes seconds to evaluate; Ctrl-C in
    the middle of it cancels there (llama.cpp's abort callback), not after it."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "build.log"
    transcript = tmp_path / "chat.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "boundctx", "ask", "--file", str(example), "--n-ctx", "2048",
                             "--transcript", str(transcript), "Which step failed?"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    while b"reading section 1/" not in seen:
        chunk = os.read(proc.stderr.fileno(), 4096)
        assert chunk, seen.decode(errors="replace")
        seen += chunk
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = (seen + err).decode(errors="replace")
    assert proc.returncode == 130, err
    assert out == b"" and "stopped; the reply is not complete" in err
    assert "reading section 2/" not in err  # it never went on to the next section
    assert not transcript.exists()  # nothing appended, not even a new file


def test_a_file_redirected_to_stdin_is_attached_and_said(tmp_path, scripted_server):
    log = tmp_path / "build.log"
    log.write_bytes(b"step 3: FAILED caf\xe9\n")  # not UTF-8: replaced, and said
    server = scripted_server(_sse("ok"))
    with open(log, "rb") as stdin:
        out = subprocess.run(_ask(server.url, "q"), stdin=stdin, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "File stdin:\nstep 3: FAILED caf\ufffd\n" in _user_text(server.requests[0])
    err = out.stderr.decode()
    assert "attached standard input (20 bytes) as 'stdin'" in err
    assert "stdin: 1 byte sequence(s) that are not UTF-8 were replaced by U+FFFD" in err


def test_no_stdin_leaves_a_pipe_alone(scripted_server):
    server = scripted_server(_sse("ok"))
    out = subprocess.run(_ask(server.url, "--no-stdin", "q"), input=b"not for the model", capture_output=True,
                         timeout=60)
    assert out.returncode == 0 and _user_text(server.requests[0]) == "q"


def test_a_reply_cut_at_its_budget_is_not_appended_to_the_transcript(tmp_path, scripted_server, capsys):
    path = tmp_path / "chat.jsonl"
    server = scripted_server(_sse("The build failed at", finish="length"))
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(path), "q"]) == 3
    err = capsys.readouterr().err
    assert "not complete" in err and "nothing was appended" in err and not path.exists()


def test_the_interrupt_handler_is_put_back_after_a_reply(scripted_server, capsys):
    server = scripted_server(_sse("ok"))
    before = signal.getsignal(signal.SIGINT)
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "q"]) == 0
    assert signal.getsignal(signal.SIGINT) is before


def test_notices_name_what_was_clipped_and_what_was_read_in_sections():
    from boundctx.cli.ask import _fitted_notice
    from boundctx.events import Fitted

    assert _fitted_notice(Fitted(3, 3, prompt_limit=1000)) is None
    said = _fitted_notice(Fitted(10, 4, [0, 1, 2, 3, 4, 5], 2, 1, ["build.log"], 1000))
    assert "6 oldest of 10 messages were left out to fit the 1,000-token prompt budget" in said
    assert "(2 of them earlier tool calls and results)" in said
    assert "1 tool result(s) cut to chat.tool_result_clip_chars" in said
    assert "build.log too long to send whole: read completely in sections" in said


def test_the_status_line_counts_down_the_estimate_the_events_carry():
    from boundctx.cli._progress import LiveStatus
    from boundctx.cli.ask import _Progress
    from boundctx.events import AnalysisProgress, Stage

    status = LiveStatus(enabled=False, clock=lambda: 0.0)
    seen = []
    status.set = lambda text, eta_s=None: seen.append((text, eta_s))
    progress = _Progress(status)
    # The number every front end shows is the event's own (the engine's one estimate of
    # the whole reply), not one the CLI works out from the sections alone.
    for event in [AnalysisProgress(1, 3, 0, "reading", 0.0),
                  AnalysisProgress(2, 3, 1, "reading", 10.0, remaining_s=41.5),
                  AnalysisProgress(3, 3, 0, "done", 30.0, remaining_s=12.0),
                  Stage("answering", 30.0, remaining_s=12.0), Stage("rereading", 45.0, 1)]:
        progress.on(event)
    assert seen == [("reading section 1/3 (worker 1)", None), ("reading section 2/3 (worker 2)", 41.5),
                    ("read all 3 sections", 12.0), ("answering", 12.0), ("rereading the original (round 1)", None)]


def test_the_status_line_never_says_0_s_left_while_the_reply_goes_on():
    from boundctx.cli._progress import LiveStatus

    now = [0.0]
    status = LiveStatus(enabled=False, clock=lambda: now[0])
    status.set("answering", eta_s=3.2)
    assert status.line() == "answering · 0 s · about 4 s left"
    now[0] = 2.9
    assert status.line() == "answering · 3 s · about 1 s left"  # not "about 0 s"
    now[0] = 3.2
    assert status.line() == "answering · 3 s · running over the estimate"
    now[0] = 60.0
    assert status.line() == "answering · 60 s · running over the estimate"
    status.set("rereading the original (round 1)", eta_s=None)  # no estimate: none said
    assert status.line() == "rereading the original (round 1) · 60 s"


def test_ask_shows_the_engines_estimate_on_its_status_line():
    from boundctx.cli import ask as ask_module
    from boundctx.events import AnalysisProgress, Stage
    from boundctx.providers import ScriptedProvider

    from tests.analysis.test_engine import LOG, Model
    from tests.analysis.test_engine import settings as engine_settings

    events, shown = [], []

    class Recorded:
        def set(self, text, *, eta_s=None):
            shown.append((text, eta_s))

    progress = ask_module._Progress(Recorded())

    def on_event(event):
        events.append(event)
        progress.on(event)

    ask_module.ask("Which step failed?", provider=ScriptedProvider(Model(), context_window=8192),
                   settings=engine_settings(), files=[("build.log", LOG)], on_event=on_event)
    carried = [e.remaining_s for e in events if isinstance(e, Stage)
               or isinstance(e, AnalysisProgress) and e.phase in ("reading", "done")]
    assert [eta for _, eta in shown] == carried
    assert shown[-1][0] == "answering" and shown[-1][1] is not None and shown[-1][1] > 0


def test_a_closed_status_line_draws_nothing_more(capsys):
    from boundctx.cli._progress import LiveStatus

    status = LiveStatus(live=True, interval=3600)
    status.set("answering")
    status.close()
    capsys.readouterr()
    status.set("rereading the original (round 1)")  # the answer owns the terminal now
    status.close()
    assert capsys.readouterr().err == ""


def test_a_question_that_is_not_utf8_is_sent_with_replacements_and_said(scripted_server):
    server = scripted_server(_sse("ok"))
    out = subprocess.run(_ask(server.url, b"caf\xe9?"), stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert _user_text(server.requests[0]) == "caf\ufffd?"
    assert b"the question: 1 byte sequence(s) that are not UTF-8" in out.stderr
