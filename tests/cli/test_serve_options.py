"""``boundctx serve``'s keys and the model flags of every command (issue 22, findings 3
and 15): ``--api-key`` on serve is the key clients must send, as for llama.cpp's server
and vLLM; the model server's key is ``--upstream-api-key``; a blank or unsendable key is
refused, never taken; a flag the chosen provider would not use is refused, not ignored.

Whatever starts a server runs as a real ``python -m boundctx serve`` process: a refusal
that did not happen would otherwise be a server that never returns."""

import json
import os
import pathlib
import subprocess
import sys
import time

import httpx
import pytest

from boundctx.cli import main

from tests._support.servers import delta, free_port, running_process

pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")

CATALOG = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "bookings.toml")
NO_MODEL = ["--provider", "remote", "--base-url", "http://127.0.0.1:9", "--model", "scripted"]


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOUNDCTX_")}
    env["BOUNDCTX_CONFIG"] = str(tmp_path / "no-config.toml")
    env.update(extra)
    return env


def _serve_argv(tmp_path, *flags, port):
    return [sys.executable, "-m", "boundctx", "serve", "--port", str(port), "--sessions-dir",
            str(tmp_path / "sessions"), *flags]


def refused(tmp_path, *flags, env=None):
    """``boundctx serve FLAGS``, which must exit before it serves: its stderr. Fails, and
    says what the server answered without a key, if it starts serving instead."""
    port = free_port()
    proc = subprocess.Popen(_serve_argv(tmp_path, *flags, port=port), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env or _env(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            pytest.fail(f"boundctx serve {' '.join(flags)} started serving (GET /v1/models without a key: "
                        f"{r.status_code})")
        assert proc.poll() == 2, "boundctx serve neither refused nor served"
        return proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        proc.stderr.close()


@pytest.mark.parametrize("value", ["", " ", "  \t\n"])
def test_a_blank_serve_key_variable_is_refused_not_taken_as_a_key(tmp_path, value):
    for host in ("127.0.0.1", "0.0.0.0"):  # beyond loopback a blank key would pass for a key
        err = refused(tmp_path, *NO_MODEL, "--host", host, env=_env(tmp_path, BOUNDCTX_SERVE_API_KEY=value))
        assert "BOUNDCTX_SERVE_API_KEY is set but blank; unset it or give a key" in err and "Traceback" not in err


@pytest.mark.parametrize("line", ["two words", "tab\there", "bell\x07", "del\x7f", "clé", "nul\x00byte"])
def test_a_key_file_line_that_could_not_be_sent_as_written_is_refused_without_showing_it(tmp_path, line):
    keys = tmp_path / "keys"
    keys.write_bytes(b"# the team's keys\ngood-key-1\n" + line.encode("utf-8") + b"\n")
    err = refused(tmp_path, *NO_MODEL, "--api-key-file", str(keys))
    assert f"line 3 of the API key file {str(keys)!r}" in err and "printable ASCII" in err
    assert line not in err and "Traceback" not in err


def test_a_blank_or_spaced_api_key_flag_is_refused(tmp_path):
    assert "--api-key is blank" in refused(tmp_path, *NO_MODEL, "--api-key", " ")
    err = refused(tmp_path, *NO_MODEL, "--api-key", "sk two")
    assert "the key of --api-key holds a space" in err and "sk two" not in err


def test_serve_api_key_is_the_key_clients_must_send(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = _serve_argv(tmp_path, *NO_MODEL, "--api-key", "first-key", "--api-key", "second-key", port=port)
    with running_process(argv, url + "/health", what="boundctx serve", log_path=tmp_path / "serve.log",
                         env=_env(tmp_path, BOUNDCTX_SERVE_API_KEY="from-env"), timeout=60):
        assert httpx.get(url + "/v1/models").status_code == 401
        assert httpx.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        for key in ("first-key", "second-key", "from-env"):  # the flags and the variable together
            assert httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert "API key required" in (tmp_path / "serve.log").read_text()


def test_serve_sends_the_upstream_key_to_the_model_server_and_not_the_clients_key(tmp_path, scripted_server):
    upstream = scripted_server((200, [delta("hi"), delta(finish="stop")]), (200, [delta("hi"), delta(finish="stop")]))
    for flags, env, expected in ((["--upstream-api-key", "upstream-key"], {"BOUNDCTX_API_KEY": "env-key"},
                                  "Bearer upstream-key"),
                                 ([], {"BOUNDCTX_API_KEY": "env-key"}, "Bearer env-key")):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = _serve_argv(tmp_path, "--provider", "remote", "--base-url", upstream.url, "--model", "m",
                           "--api-key", "client-key", *flags, port=port)
        with running_process(argv, url + "/health", what="boundctx serve", log_path=tmp_path / "serve.log",
                             env=_env(tmp_path, **env), timeout=60):
            r = httpx.post(url + "/v1/chat/completions", timeout=60, headers={"Authorization": "Bearer client-key"},
                           json={"model": "m", "messages": [{"role": "user", "content": "hello"}]})
            assert r.status_code == 200, r.text
            assert json.loads(r.text)["choices"][0]["message"]["content"] == "hi"
        assert upstream.headers[-1].get("Authorization") == expected


@pytest.mark.parametrize("flags, said", [
    (["--upstream-api-key", "k"], "--upstream-api-key has no effect with --provider local"),
    (["--base-url", "http://127.0.0.1:9"], "--base-url has no effect with --provider local"),
    (["--provider", "remote", "--base-url", "http://127.0.0.1:9", "--model", "m", "--threads", "2", "--seed", "3"],
     "--threads and --seed have no effect with --provider remote"),
])
def test_serve_refuses_a_model_flag_the_provider_would_not_use(tmp_path, flags, said):
    err = refused(tmp_path, *flags)
    assert said in err and "Traceback" not in err


@pytest.mark.parametrize("argv, said", [
    (["ask", "--api-key", "k", "q"], "--api-key has no effect with --provider local"),
    (["ask", "--base-url", "http://127.0.0.1:9", "q"], "--base-url has no effect with --provider local"),
    (["plan", "--catalog", CATALOG, "--api-key", "k", "cancel"], "--api-key has no effect with --provider local"),
    (["ask", "--provider", "remote", "--base-url", "http://127.0.0.1:9", "--gpu-layers", "1", "q"],
     "--gpu-layers has no effect with --provider remote (it is for --provider local)"),
    (["plan", "--catalog", CATALOG, "--provider", "remote", "--base-url", "http://127.0.0.1:9", "--extra-buffers",
      "off", "cancel"], "--extra-buffers has no effect with --provider remote"),
])
def test_ask_and_plan_refuse_a_model_flag_the_provider_would_not_use(argv, said, capsys):
    assert main([*argv, "--no-stdin"] if argv[0] == "ask" else argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def _config_choosing_remote(url: str, key_file: pathlib.Path) -> pathlib.Path:
    """The test's config file (conftest points BOUNDCTX_CONFIG at it), choosing the
    remote provider and its server, model and key file."""
    path = pathlib.Path(os.environ["BOUNDCTX_CONFIG"])
    path.write_text(f'[chat]\nprovider = "remote"\n\n[remote]\nbase_url = "{url}"\nmodel = "cfg-model"\n'
                    f'api_key_file = "{key_file}"\n')
    return path


def test_a_config_file_chooses_the_remote_provider_its_model_and_its_key(tmp_path, scripted_server, capsys):
    upstream = scripted_server((200, [delta("from the config"), delta(finish="stop")]),
                               (200, [delta("from the flag"), delta(finish="stop")]))
    key_file = tmp_path / "upstream.key"
    key_file.write_text("sk-upstream\n")
    _config_choosing_remote(upstream.url, key_file)
    assert main(["ask", "--no-stdin", "q"]) == 0
    assert "from the config" in capsys.readouterr().out
    assert upstream.requests[0]["model"] == "cfg-model"
    assert upstream.headers[0].get("Authorization") == "Bearer sk-upstream"
    # --model names the chosen provider's model, wherever the choice was made.
    assert main(["ask", "--no-stdin", "--model", "flag-model", "q"]) == 0
    assert upstream.requests[1]["model"] == "flag-model"


def test_a_flag_the_configured_provider_would_not_use_is_refused_saying_where_it_was_chosen(tmp_path, capsys):
    config_file = _config_choosing_remote("http://127.0.0.1:9", tmp_path / "no-key")
    assert main(["ask", "--no-stdin", "--threads", "2", "q"]) == 2
    err = capsys.readouterr().err
    assert "--threads has no effect with --provider remote (chat.provider, from file" in err
    assert str(config_file) in err and "Traceback" not in err


def test_the_provider_help_lists_every_registered_provider(capsys):
    from boundctx.providers import PROVIDERS

    with pytest.raises(SystemExit):
        main(["ask", "--help"])
    out = "".join(capsys.readouterr().out.split())  # argparse wraps lines (at hyphens too)
    for kind in PROVIDERS.values():
        assert "".join(f"{kind.name}: {kind.summary}".split()) in out
