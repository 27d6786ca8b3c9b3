"""``boundctx ask``: the README's first command, on the embedded model, and its errors."""

import json
import pathlib

import pytest

from boundctx.cli import main

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "build.log"


@pytest.mark.slow
def test_the_readme_command_reads_the_example_in_sections_on_the_embedded_model(capsys):
    """A ~2,800-token input at a 2,048-token context with two workers: read in sections,
    every section noted, notes within 384 tokens, the coordinator prompt smaller than
    the input (the same command as the README's first line, with --json)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from boundctx.tokens.llama import LlamaCounter

    code = main(["ask", "--file", str(EXAMPLE), "--n-ctx", "2048", "--analysis-workers", "2", "--max-tokens", "64",
                 "--json", "Which step failed, and what is its job id?"])
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[-1]["type"] == "done"
    # 64 tokens may cut it, and a small model may loop: both are incomplete, exit 3
    assert code == (3 if events[-1]["finish_reason"] in ("length", "repetition") else 0)
    progress = [e for e in events if e["type"] == "analysis_progress"]
    total = progress[0]["sections"]
    assert total >= 2
    assert sorted(e["section"] for e in progress if e["phase"] == "noted") == list(range(1, total + 1))
    assert {e["worker"] for e in progress} == {0, 1}
    assert all(e["notes_tokens"] <= 384 for e in progress if e["phase"] == "noted")
    # The coordinator ran (what it says is the tiny model's business: it may even stop at once).
    assert events[-1]["usage"]["prompt_tokens"] > 0
    counter = LlamaCounter()
    assert counter.count_text(EXAMPLE.read_text()) > 2048  # it could not have been sent whole
    assert events[-1]["usage"]["prompt_tokens"] < counter.count_text(EXAMPLE.read_text())


def test_ask_refuses_bad_input_clearly(tmp_path, capsys):
    assert main(["ask", "--file", str(tmp_path / "missing.txt"), "q"]) == 2
    assert "No such file" in capsys.readouterr().err
    assert main(["ask", "--provider", "remote", "q"]) == 2
    err = capsys.readouterr().err
    assert "needs remote.base_url" in err and "--base-url URL" in err
    assert main(["ask", "--analysis-workers", "9", "--provider", "remote", "--base-url", "http://x", "q"]) == 2
    assert "accepted 0–8" in capsys.readouterr().err


def test_ask_against_a_server_that_is_not_there_fails_with_the_reason(capsys):
    from tests._support.servers import free_port
    code = main(["ask", "--provider", "remote", "--base-url", f"http://127.0.0.1:{free_port()}", "hello"])
    assert code == 1 and "cannot connect" in capsys.readouterr().err


def _sse(text):
    from tests._support.servers import delta
    return 200, [delta(text), delta(finish="stop")]


def test_ask_continues_a_transcript_and_appends_the_exchange(tmp_path, scripted_server, capsys):
    from boundctx.transcript import Transcript
    from boundctx.transcript.chat import chat_messages

    server = scripted_server(_sse("Step 3 failed."), _sse("Job 77."))
    path = tmp_path / "chat.jsonl"  # does not exist yet: a new conversation
    remote = ["--provider", "remote", "--base-url", server.url, "--transcript", str(path)]
    assert main(["ask", *remote, "Which step failed?"]) == 0
    assert main(["ask", *remote, "And its job id?"]) == 0
    assert capsys.readouterr().out.splitlines() == ["Step 3 failed.", "Job 77."]
    # The second request carried the first exchange before the new question.
    assert [(m["role"], m["content"]) for m in server.requests[1]["messages"][-3:]] == [
        ("user", "Which step failed?"), ("assistant", "Step 3 failed."), ("user", "And its job id?")]
    with Transcript.open(path) as t:
        messages = chat_messages(t.window()).messages
    assert [m["content"] for m in messages] == ["Which step failed?", "Step 3 failed.", "And its job id?", "Job 77."]


def test_ask_appends_nothing_when_the_reply_fails_and_never_writes_another_agents_file(
        tmp_path, scripted_server, capsys):
    server = scripted_server((400, {"error": {"message": "bad request"}}))
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"type": "message", "message": {"role": "user", "content": "hi"}}) + "\n")
    before = path.read_bytes()
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(path), "q"]) == 1
    assert "nothing was appended" in capsys.readouterr().err and path.read_bytes() == before

    claude = tmp_path / "claude.jsonl"
    claude.write_text(json.dumps({"type": "user", "message": {"role": "user", "content": "hi"}}) + "\n")
    requests = len(server.requests)
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(claude), "q"]) == 2
    assert "another agent's format" in capsys.readouterr().err
    assert len(server.requests) == requests  # refused before any model call

    server = scripted_server(_sse("read only"))
    assert main(["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(claude),
                 "--no-save", "q"]) == 0
    assert server.requests[0]["messages"][0] == {"role": "user", "content": "hi"}
    assert claude.read_text().count("\n") == 1


def test_plan_prints_the_plan_from_a_server_and_logs_every_attempt(tmp_path, scripted_server, capsys):
    """``boundctx plan`` through the remote provider: the scripted server answers the
    single-call baseline's schema; the plan, and the replay log line, come out."""
    from boundctx.understanding import read_attempts

    catalog = tmp_path / "c.json"
    catalog.write_text(json.dumps({"operations": [
        {"name": "cancel_booking", "description": "Cancel a booking", "record_kind": "booking"}]}))
    records = tmp_path / "r.json"
    records.write_text(json.dumps([{"id": "b1", "kind": "booking", "label": "Luigi's"},
                                   {"id": "b2", "kind": "booking", "label": "Sakura"}]))
    answer = json.dumps({"acts": [{"operation": "o1", "record": "r2", "arguments": {}}]})
    usage = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 120, "completion_tokens": 20}}
    server = scripted_server((200, [{"choices": [{"index": 0, "delta": {"content": answer}, "finish_reason": None}]},
                                    usage]), _sse(answer))
    log = tmp_path / "replay.jsonl"
    code = main(["plan", "--catalog", str(catalog), "--records", str(records), "--single-call", "--log", str(log),
                 "--provider", "remote", "--base-url", server.url, "--json", "cancel Sakura"])
    out, err = capsys.readouterr()
    plan = json.loads(out)
    assert code == 0 and plan["status"] == "ready"
    # Progress on stderr, apart from the plan: which task, which call of how many.
    assert "understanding: single call, model call 1 of at most 24" in err
    assert [(a["operation"], a["record"]) for a in plan["acts"]] == [("cancel_booking", "b2")]
    assert server.requests[0]["response_format"]["type"] in ("json_schema", "json_object")
    assert [(a.task, a.prompt_tokens) for a in read_attempts(str(log))] == [("single_call", 120)]
    # A server that reports no usage cannot run under a token bound: never guessed.
    code = main(["plan", "--catalog", str(catalog), "--records", str(records), "--single-call",
                 "--provider", "remote", "--base-url", server.url, "cancel Sakura"])
    assert code == 1 and "no token usage" in capsys.readouterr().out

    assert main(["plan", "--catalog", str(tmp_path / "none.toml"), "x"]) == 2
    assert "cannot read the catalog" in capsys.readouterr().err
    assert main(["plan", "--catalog", str(catalog), "--click", "fly", "--provider", "remote", "--base-url",
                 server.url, "x"]) == 2
    assert "no operation 'fly'" in capsys.readouterr().err
