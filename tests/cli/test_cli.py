"""The command line: each command is a plain function behind argparse."""

import argparse
import json
import subprocess
import sys

import pytest

from boundctx import cli
from boundctx.cli import main
from boundctx.transcript import encode_record

from tests._support import rewound_session


def write(path, n):
    path.write_bytes(b"".join(encode_record({"type": "message", "id": f"m{i}",
                                             "message": {"role": "user", "content": "w " * (i + 100)}})
                              for i in range(n)))
    return path


def test_reindex_reports_each_file_and_fails_when_any_input_fails(tmp_path, capsys):
    write(tmp_path / "a.jsonl", 3)
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "b.jsonl", 5)
    (tmp_path / "notes.txt").write_text("not a transcript")
    assert main(["reindex", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "a.jsonl: 3 messages" in out and "b.jsonl: 5 messages" in out and "notes.txt" not in out
    assert main(["reindex", str(tmp_path / "a.jsonl"), str(tmp_path / "missing.jsonl")]) == 1
    captured = capsys.readouterr()
    assert "missing.jsonl: FAILED: no such file" in captured.err and "1 of 2 failed" in captured.err


def test_reindex_json_prints_one_report_per_file(tmp_path, capsys):
    write(tmp_path / "a.jsonl", 4)
    assert main(["reindex", "--json", str(tmp_path / "a.jsonl"), str(tmp_path / "empty_dir_missing")]) == 1
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert reports[0]["ok"] is False and reports[1]["ok"] is True and reports[1]["messages"] == 4
    assert reports[1]["sidecar"].endswith("a.jsonl.layout")


def test_reindex_of_an_empty_folder_is_a_failure_with_a_reason(tmp_path, capsys):
    assert main(["reindex", str(tmp_path)]) == 1
    assert "no *.jsonl transcripts" in capsys.readouterr().err


def test_session_get_prints_a_bounded_window(tmp_path, capsys):
    path = write(tmp_path / "a.jsonl", 10)
    assert main(["session", "get", str(path), "--limit", "2", "--content-limit", "4"]) == 0
    out = capsys.readouterr().out
    assert "messages 8-9 of 10" in out and "--before 8" in out
    assert "## [9] user" in out and "more bytes not shown" in out


def test_session_get_json_is_the_window(tmp_path, capsys):
    path = write(tmp_path / "a.jsonl", 10)
    assert main(["session", "get", str(path), "--before", "5", "--limit", "3", "--json"]) == 0
    w = json.loads(capsys.readouterr().out)
    assert w["message_start"] == 2 and [m["index"] for m in w["messages"]] == [2, 3, 4]
    assert w["has_more_before"] is True and w["message_count"] == 10


@pytest.mark.parametrize("args, message", [
    (["--limit", "-1"], "--limit must be >= 0"),
    (["--before", "99"], "past the last message"),
])
def test_session_get_bad_arguments_exit_2_with_the_reason(tmp_path, capsys, args, message):
    path = write(tmp_path / "a.jsonl", 3)
    assert main(["session", "get", str(path), *args]) == 2
    assert message in capsys.readouterr().err


def test_session_get_missing_file_exits_2(tmp_path, capsys):
    assert main(["session", "get", str(tmp_path / "nope.jsonl")]) == 2
    assert "no transcript at" in capsys.readouterr().err


def test_sample_writes_a_seeded_transcript_and_refuses_to_overwrite(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    assert main(["sample", str(path), "--size", "200k", "--seed", "7"]) == 0
    first = path.read_bytes()
    assert 200_000 <= len(first) < 400_000
    assert main(["sample", str(path), "--size", "200k"]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(["sample", str(path), "--size", "200k", "--seed", "7", "--force"]) == 0
    assert path.read_bytes() == first  # seeded: the same bytes again
    assert main(["sample", str(path), "--size", "lots", "--force"]) == 2


def test_python_dash_m_runs_the_cli(tmp_path):
    path = write(tmp_path / "a.jsonl", 2)
    out = subprocess.run([sys.executable, "-m", "boundctx", "session", "get", str(path), "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["message_count"] == 2


def test_progress_bar_is_drawn_only_when_enabled_and_work_is_reported(capsys):
    from boundctx.cli._progress import byte_progress

    with byte_progress(100, "x", enabled=True) as report:
        report(0)
    assert capsys.readouterr().err == ""  # no work reported: no bar
    with byte_progress(100, "x", enabled=True) as report:
        report(40)
        report(100)
    assert "x:" in capsys.readouterr().err  # tqdm redraws at most every 0.1 s
    with byte_progress(1 << 40, "x") as report:  # not a terminal: never drawn
        report(1 << 39)
    assert capsys.readouterr().err == ""


def test_session_get_prints_compactions_in_file_order(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    lines = [encode_record({"type": "compaction", "summary": "early"})]
    lines += [encode_record({"type": "message", "message": {"role": "user", "content": f"m{i}"}}) for i in range(3)]
    lines.insert(3, encode_record({"type": "compaction", "summary": "late"}))
    path.write_bytes(b"".join(lines))
    assert main(["session", "get", str(path)]) == 0
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("## ")]
    assert heads == ["## compaction (line 0)", "## [0] user", "## [1] user",
                     "## compaction (line 3)", "## [2] user"]


def test_split_lists_sections_that_tile_the_file_and_keep_undecodable_bytes(tmp_path, capsys):
    path = tmp_path / "log.txt"
    path.write_bytes(("step ok\n" * 300).encode() + b"bad \xff byte\n" + "\u4E2D\u6587 done\n".encode())
    assert main(["split", str(path), "--tokenizer", "estimate", "--max-tokens", "200", "--overlap", "16",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    sections = report["sections"]
    assert report["chars"] == len(text) and sections[0]["start"] == 0 and sections[-1]["end"] == len(text)
    assert all(b["start"] == a["end"] - 16 for a, b in zip(sections, sections[1:]))
    assert all(s["tokens"] <= 200 for s in sections)


def test_split_with_the_embedded_model_prints_a_table(tmp_path, capsys):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    path = tmp_path / "t.txt"
    path.write_text("hello world\n" * 50)
    assert main(["split", str(path), "--max-tokens", "40", "--overlap", "8"]) == 0
    captured = capsys.readouterr()
    assert "newline" in captured.out and "sections over 600 characters" in captured.err


def test_split_refuses_bad_input_clearly(tmp_path, capsys):
    assert main(["split", str(tmp_path / "missing.txt"), "--tokenizer", "estimate"]) == 2
    assert "No such file" in capsys.readouterr().err
    (tmp_path / "t.txt").write_text("x")
    assert main(["split", str(tmp_path / "t.txt"), "--tokenizer", "nope"]) == 2
    assert "unknown tokenizer 'nope'" in capsys.readouterr().err
    assert main(["split", str(tmp_path / "t.txt"), "--tokenizer", "estimate", "--max-tokens", "0"]) == 2
    assert "max_tokens must be >= 1" in capsys.readouterr().err


def test_session_get_limits_come_from_the_window_settings(tmp_path, capsys, monkeypatch):
    path = write(tmp_path / "a.jsonl", 10)
    monkeypatch.setenv("BOUNDCTX_TRANSCRIPT_WINDOW_MESSAGES", "4")
    assert main(["session", "get", str(path), "--json"]) == 0
    assert [m["index"] for m in json.loads(capsys.readouterr().out)["messages"]] == [6, 7, 8, 9]
    assert main(["session", "get", str(path), "--json", "--limit", "2"]) == 0  # a flag wins
    assert len(json.loads(capsys.readouterr().out)["messages"]) == 2
    monkeypatch.delenv("BOUNDCTX_TRANSCRIPT_WINDOW_MESSAGES")
    assert main(["config", "set", "transcript.window_content_bytes", "40"]) == 0
    capsys.readouterr()
    assert main(["session", "get", str(path), "--json"]) == 0
    messages = json.loads(capsys.readouterr().out)["messages"]
    assert len(messages) == 10 and all(m["cut_bytes"] > 150 for m in messages)  # 200+ bytes cut at 40


def test_session_get_refuses_a_bad_window_setting_before_reading(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BOUNDCTX_TRANSCRIPT_WINDOW_CONTENT_BYTES", "0")
    # Refused before the file is even looked at: a missing one is not the error shown.
    assert main(["session", "get", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "BOUNDCTX_TRANSCRIPT_WINDOW_CONTENT_BYTES" in err and "too small" in err
    path = write(tmp_path / "a.jsonl", 3)
    assert main(["session", "get", str(path), "--limit", "1", "--content-limit", "0",
                 "--page-bytes", "100"]) == 0  # not needed, not read


def test_verbosity_flags_decide_what_of_boundctx_and_llama_cpp_logs_reach_stderr(capsys):
    """Quiet by default: boundctx's decisions need -v, llama.cpp's own lines -v (warnings)
    or -vv (everything); -q leaves errors only. Flags work before and after the command."""
    import logging

    from boundctx import cli

    seen = {}
    for argv in (["config", "show"], ["-v", "config", "show"], ["-vv", "config", "show"],
                 ["-q", "config", "show"], ["config", "show", "-v"]):
        args = cli.build_parser().parse_args(argv)
        restore = cli._configure_logging(cli._verbosity(args))
        try:
            logging.getLogger("boundctx.local").info("decided something")
            logging.getLogger("boundctx.llama_cpp").warning("llama.cpp chatter")
            logging.getLogger("boundctx.llama_cpp").debug("llama.cpp detail")
            logging.getLogger("boundctx.local").error("went wrong")
        finally:
            restore()
        seen[" ".join(argv)] = capsys.readouterr().err
    assert seen["config show"] == "boundctx: went wrong\n"
    verbose = seen["-v config show"]
    assert "decided something" in verbose and "llama.cpp chatter" in verbose and "detail" not in verbose
    assert "llama.cpp detail" in seen["-vv config show"]
    assert seen["-q config show"] == "boundctx: went wrong\n"
    assert seen["config show -v"] == verbose
    assert logging.getLogger("boundctx").propagate  # undone: caplog and front ends see records again


def test_session_get_errors_speak_of_flags_not_parameters(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    assert main(["sample", str(path), "--size", "50k"]) == 0
    capsys.readouterr()
    for argv, said in ((["--before", "99999"], "--before 99999 is past the last message"),
                       (["--limit", "-1"], "--limit must be >= 0, got -1"),
                       (["--content-limit", "-3"], "--content-limit must be >= 0, got -3")):
        assert main(["session", "get", str(path), *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and "message_" not in err and "None" not in err
    assert main(["session", "get", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "no transcript at" in err and "create=True" not in err and "Errno" not in err


def _deep_json(path, depth=100_000):
    path.write_text("[" * depth + "]" * depth)
    return path


def test_bad_values_on_the_command_line_are_refused_in_words_not_tracebacks(tmp_path, capsys, monkeypatch):
    text = tmp_path / "n.txt"
    text.write_text("hello\n")
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("a = " + "[" * 3000 + "1" + "]" * 3000 + "\n")
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_bytes(b"[chat]\nn_ctx = 1\xff\n")
    cases = [
        (["ask", "--max-tokens", "0", "--provider", "remote", "--base-url", "http://127.0.0.1:9", "q"],
         "--max-tokens must be >= 1", None),
        (["split", str(text), "--tokenizer", "estimate", "--overlap", str(10 ** 20)], "overlap must be at most", None),
        (["split", str(text), "--tokenizer", "estimate", "--max-tokens", str(10 ** 20)], "max_tokens must be at most",
         None),
        (["split", str(text), "--tokenizer", "hf:" + str(tmp_path / "missing.json")], "no tokenizer file at", None),
        (["sample", str(tmp_path / "s.jsonl"), "--size", "inf"], "positive number of bytes", None),
        (["sample", str(tmp_path / "s.jsonl"), "--size", "nan"], "positive number of bytes", None),
        (["plan", "--bfcl", str(_deep_json(tmp_path / "deep.json")), "x"], "nests too deeply", None),
        (["plan", "--catalog", str(_deep_json(tmp_path / "deepcat.json")), "x"], "nests too deeply", None),
        (["config", "show"], "nests too deeply to be a settings file", deep_toml),
        (["config", "show"], "is not valid TOML", bad_toml),
    ]
    for argv, said, config_file in cases:
        if config_file is not None:
            monkeypatch.setenv("BOUNDCTX_CONFIG", str(config_file))
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, (argv, err)
        monkeypatch.delenv("BOUNDCTX_CONFIG", raising=False)


@pytest.mark.parametrize("value", ["0,4", "٣", "1e3", "4 096"])
def test_environment_integers_are_ascii_digits_only(value):
    from boundctx import config
    from boundctx.errors import ConfigError

    with pytest.raises(ConfigError, match="is not an int"):
        config.load(env={"BOUNDCTX_ANALYSIS_MAX_SECTIONS": value})


def test_a_context_window_past_what_llama_cpp_holds_is_refused():
    from boundctx import config
    from boundctx.errors import ConfigError

    with pytest.raises(ConfigError, match="too large"):
        config.load(overrides={"chat.n_ctx": 2 ** 32 + 2048})


def _bounded_cli(argv, *, env=None):
    """``python -m boundctx ARGV`` in a child with a time limit and a 4 GiB address
    space: a FIFO that blocks fails by time, /dev/zero read to the end fails by memory."""
    import os
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run([sys.executable, "-m", "boundctx", *argv], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, preexec_fn=limit, env={**os.environ, **(env or {})})


_NO_SERVER = ["--provider", "remote", "--base-url", "http://127.0.0.1:9"]
_CATALOG = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "bookings.toml")


@pytest.mark.parametrize("entry", ["ask --file", "split", "plan --catalog", "plan --bfcl", "plan --records"])
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_given_as_an_input_file_is_refused_in_words_without_blocking(tmp_path, entry, special):
    from tests._support import special_input

    path, said = special_input(tmp_path, special, "input.json")
    argv = {"ask --file": ["ask", "--file", path, *_NO_SERVER, "q"],
            "split": ["split", path, "--tokenizer", "estimate"],
            "plan --catalog": ["plan", "--catalog", path, *_NO_SERVER, "x"],
            "plan --bfcl": ["plan", "--bfcl", path, *_NO_SERVER, "x"],
            "plan --records": ["plan", "--catalog", _CATALOG, "--records", path, *_NO_SERVER, "x"]}[entry]
    out = _bounded_cli(argv)
    assert out.returncode == 2 and said in out.stderr and repr(path) in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_ask_refuses_to_write_into_a_file_that_is_not_a_transcript_before_any_model_call(tmp_path, scripted_server,
                                                                                          capsys):
    from tests._support.servers import delta

    server = scripted_server((200, [delta("answer"), delta(finish="stop")]))
    png = tmp_path / "picture.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    no_newline = tmp_path / "notes.txt"
    no_newline.write_bytes(b"just some words, no newline")
    pretty = tmp_path / "pretty.json"
    pretty.write_text('{\n  "type": "message"\n}\n')
    for path, looks in ((png, "a PNG image"), (no_newline, "no complete line"), (pretty, "looks like text")):
        before = path.read_bytes()
        code = main(["ask", "--provider", "remote", "--base-url", server.url, "--transcript", str(path),
                     "--no-stdin", "q"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "does not look like a transcript" in err and looks in err and "Nothing was written" in err, err
        assert path.read_bytes() == before
    assert server.requests == []  # refused before any model call
    assert sorted(p.name for p in tmp_path.iterdir() if ".torn-" in p.name or p.name.endswith(".lock")) == []


HEAVY = ("numpy", "tqdm", "llama_cpp", "boundctx.transcript", "boundctx._native.lineindex")


@pytest.mark.parametrize("argv", [["--help"], ["ask", "--help"], ["session", "get", "--help"], ["nosuch"]])
def test_help_and_a_wrong_command_import_nothing_heavy(argv):
    # Start-up is the whole cost of `boundctx --help`: only the named command's module
    # is imported, and none of them pulls in numpy, the native core or llama.cpp to
    # describe itself.
    code = ("import sys\nfrom boundctx.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stderr
    if argv == ["--help"]:
        for name in cli.COMMANDS:
            assert name in run.stdout and cli.COMMANDS[name][1][:30] in run.stdout.replace("\n", " ")


def test_reindex_imports_neither_numpy_nor_the_store(tmp_path):
    # `boundctx reindex` of a big file should cost the scan, not imports: the native
    # scan and the sidecar encoder, without numpy, msgspec or the transcript store. No
    # logging either: the command says it never logs (LOGS = False), and this holds it.
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"type":"message","id":"a"}\n' * 100)
    code = ("import sys\nfrom boundctx.cli import main\n"
            f"code = main(['reindex', {str(path)!r}])\n"
            "print(code, [m for m in ('numpy', 'tqdm', 'msgspec', 'logging', 'dataclasses', "
            "'boundctx.transcript.store', 'boundctx.transcript.layout') if m in sys.modules])")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip().splitlines()[-1] == "0 []", run.stdout + run.stderr
    assert "100 messages" in run.stdout


def test_every_command_module_builds_its_parser_from_the_table():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(cli.COMMANDS)
    for action in sub._choices_actions:
        assert action.help == cli.COMMANDS[action.dest][1]


def rewound(path):
    """A pi session with a rewind: m0..m3, then n2 forking after m1."""
    records = rewound_session(old=4, new=1, old_text="old {k} " + "o" * 300, new_text="new {k}", header=False)
    path.write_bytes(b"".join(encode_record(r) for r in records))
    return path


def test_session_get_follows_the_newest_branch_lists_the_others_and_reads_one(tmp_path, capsys):
    path = rewound(tmp_path / "tree.jsonl")
    assert main(["session", "get", str(path)]) == 0
    out = capsys.readouterr().out
    assert "messages 0-2 of 3" in out and "new 2" in out and "old 3" not in out
    assert main(["session", "get", str(path), "--branches"]) == 0
    out = capsys.readouterr().out
    assert "2 branches" in out and "--leaf 4  3 messages, the newest" in out
    assert "--leaf 3  4 messages, leaves it after message 1  (id m3)" in out
    assert main(["session", "get", str(path), "--leaf", "m3", "--json"]) == 0
    w = json.loads(capsys.readouterr().out)
    assert [m["record"]["id"] for m in w["messages"]] == ["m0", "m1", "m2", "m3"] and w["leaf"] == 3
    assert main(["session", "get", str(path), "--leaf", "3", "--page-bytes", "400"]) == 0
    assert "messages 3-3 of 4" in capsys.readouterr().out
    assert main(["session", "get", str(path), "--leaf", "nope"]) == 2
    assert "--leaf 'nope' is the id of no entry" in capsys.readouterr().err
    assert main(["session", "get", str(path), "--page-bytes", "0"]) == 2
    assert "--page-bytes must be >= 1" in capsys.readouterr().err
