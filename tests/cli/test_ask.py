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
    assert code == 0 and events[-1]["type"] == "done"
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
    assert "needs --base-url" in capsys.readouterr().err
    assert main(["ask", "--analysis-workers", "9", "--provider", "remote", "--base-url", "http://x", "q"]) == 2
    assert "accepted 0–8" in capsys.readouterr().err


def test_ask_against_a_server_that_is_not_there_fails_with_the_reason(capsys):
    from servers import free_port
    code = main(["ask", "--provider", "remote", "--base-url", f"http://127.0.0.1:{free_port()}", "hello"])
    assert code == 1 and "cannot connect" in capsys.readouterr().err
