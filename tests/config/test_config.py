"""Settings: declared keys, four sources in precedence order, clear refusals."""

import json
import os

import pytest

from boundctx import config
from boundctx.cli import main
from boundctx.errors import ConfigError

# DESIGN.md's limits table, and the understanding bounds decision 0011 adds:
# key -> (default, a value just outside what is accepted).
DESIGN_LIMITS = {
    "chat.analysis_workers": (2, 9),
    "chat.n_ctx": (8192, 511),
    "chat.tool_result_clip_chars": (4000, -1),
    "chat.low_water": (0.5, 0.0),
    "analysis.worker_n_ctx": (4096, 511),
    "analysis.worker_timeout_s": (120, 0),
    "analysis.notes_max_tokens": (384, 15),
    "analysis.max_source_chars": (1_000_000, 0),
    "analysis.max_sections": (64, 0),
    "analysis.overlap_chars": (64, -1),
    # Issue 16: exact rereads for models without tool calls (decision 0026).
    "analysis.constrained_rereads": (True, "maybe"),
    "analysis.history_search": (True, "sometimes"),
    "analysis.search_max_chars": (16_000_000, 999),
    "analysis.search_max_hits": (6, 51),
    "analysis.search_max_seconds": (5.0, 0),
    "understanding.max_model_calls": (24, 0),
    "understanding.max_chain_depth": (12, 0),
    "understanding.max_parallel": (4, 65),
    "understanding.max_prompt_tokens": (65536, -1),
    "understanding.wall_clock_s": (300, -1),
    "understanding.repairs": (1, 5),
    "understanding.votes": (1, 10),
    "understanding.max_units": (8, 33),
    # The model knobs (issue 10): reply sampling, a system prompt, how a local model loads.
    "chat.temperature": (0.2, 2.5),
    "chat.system_prompt": ("", 3),
    "chat.repeat_penalty": (1.1, 0.9),
    # Issue 25: the provider is a setting, and so is each provider's model and server.
    "chat.provider": ("local", "scripted"),
    "local.model": ("", 1),
    "local.threads": (0, -1),
    "local.gpu_layers": (0, -2),
    "local.seed": (1234, -1),
    "local.extra_buffers": ("auto", "sometimes"),
    "local.state_cache_mib": (512, -1),
    "remote.base_url": ("", 1),
    "remote.model": ("", 1),
    "remote.api_key_file": ("", 1),
    "remote.timeout_s": (60.0, 0),
    "remote.max_retries": (2, 17),
    "transcript.window_messages": (100, 0),
    "transcript.window_content_bytes": (65536, 0),
    "transcript.window_page_bytes": (1 << 20, 0),
    # boundctx serve (shared/research/serving.md §8.3): loopback, a bounded queue, a body cap.
    "serve.host": ("127.0.0.1", 8765),
    "serve.port": (8765, 65536),
    "serve.api_key_file": ("", 1),
    "serve.max_body_bytes": (32 << 20, 1023),
    "serve.active_replies": (1, 0),
    "serve.queue_depth": (8, -1),
    "serve.sse_ping_seconds": (15.0, -1),
    "serve.send_timeout_seconds": (30.0, 0),
    "serve.progress_max_hz": (4.0, 0),
    "serve.progress_openwebui": (True, "maybe"),
    "serve.sessions_dir": ("", 1),
    "serve.cors_origins": ("", 1),
    # Issue 22: what a connection may do before its request reaches the app.
    "serve.max_head_bytes": (64 << 10, 4095),
    "serve.head_timeout_seconds": (10.0, 0),
    "serve.max_connections": (512, 1),
}


def test_every_design_limit_is_declared_with_its_default():
    settings = config.load()
    assert set(config.KEYS) == set(DESIGN_LIMITS)
    for name, (default, _) in DESIGN_LIMITS.items():
        assert settings[name] == default and settings.source(name) == "default"


@pytest.mark.parametrize("name", sorted(DESIGN_LIMITS))
def test_a_value_outside_the_accepted_range_is_refused_with_the_range(name):
    bad = DESIGN_LIMITS[name][1]
    with pytest.raises(ConfigError, match="accepted") as info:
        config.load(overrides={name: bad})
    assert name in str(info.value) and config.KEYS[name].accepted() in str(info.value)


def test_analysis_workers_accepts_zero_to_eight():
    for n in range(9):
        assert config.load(overrides={"chat.analysis_workers": n})["chat.analysis_workers"] == n
    with pytest.raises(ConfigError, match="0–8"):
        config.load(overrides={"chat.analysis_workers": -1})


def test_precedence_is_defaults_then_file_then_environment_then_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[chat]\nanalysis_workers = 3\nn_ctx = 4096\n\n[analysis]\nmax_sections = 10\n")
    env = {"BOUNDCTX_CHAT_ANALYSIS_WORKERS": "4", "BOUNDCTX_ANALYSIS_MAX_SECTIONS": "12"}
    s = config.load(path=path, env=env, overrides={"analysis.max_sections": 20})
    assert (s["chat.n_ctx"], s.source("chat.n_ctx")) == (4096, f"file {path}")
    assert (s["chat.analysis_workers"], s.source("chat.analysis_workers")) == (
        4, "environment BOUNDCTX_CHAT_ANALYSIS_WORKERS")
    assert (s["analysis.max_sections"], s.source("analysis.max_sections")) == (20, "override")
    assert (s["analysis.overlap_chars"], s.source("analysis.overlap_chars")) == (64, "default")


def test_the_file_comes_from_boundctx_config_or_the_user_config_dir(tmp_path):
    assert config.config_path({"BOUNDCTX_CONFIG": str(tmp_path / "x.toml")}) == tmp_path / "x.toml"
    assert config.config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "boundctx" / "config.toml"
    (tmp_path / "boundctx").mkdir()
    (tmp_path / "boundctx" / "config.toml").write_text("[analysis]\noverlap_chars = 32\n")
    assert config.load(env={"XDG_CONFIG_HOME": str(tmp_path)})["analysis.overlap_chars"] == 32


def test_strings_from_the_environment_are_parsed_and_checked():
    s = config.load(env={"BOUNDCTX_ANALYSIS_WORKER_TIMEOUT_S": "2.5", "BOUNDCTX_CHAT_N_CTX": "16_384"})
    assert s["analysis.worker_timeout_s"] == 2.5 and s["chat.n_ctx"] == 16384
    for bad in ("two", "", "nan", "inf"):
        with pytest.raises(ConfigError, match="BOUNDCTX_ANALYSIS_WORKER_TIMEOUT_S"):
            config.load(env={"BOUNDCTX_ANALYSIS_WORKER_TIMEOUT_S": bad})


def test_wrong_types_in_the_file_are_refused(tmp_path):
    path = tmp_path / "c.toml"
    for body in ("[chat]\nanalysis_workers = \"2\"\n", "[chat]\nanalysis_workers = true\n",
                 "[chat]\nanalysis_workers = 2.5\n"):
        path.write_text(body)
        with pytest.raises(ConfigError, match="is not an int"):
            config.load(path=path, env={})


def test_unknown_keys_and_broken_files_say_what_is_wrong(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[chat]\nanalysis_worker = 2\n")
    with pytest.raises(ConfigError, match="did you mean 'chat.analysis_workers'"):
        config.load(path=path, env={})
    path.write_text("[chat\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(path=path, env={})
    path.write_text("chat = 3\n")
    with pytest.raises(ConfigError, match="should be a table"):
        config.load(path=path, env={})
    with pytest.raises(ConfigError, match="is a directory"):
        config.load(path=tmp_path, env={})
    with pytest.raises(ConfigError, match="unknown setting"):
        config.load(overrides={"nope": 1})
    assert config.load(path=tmp_path / "missing.toml", env={})["chat.n_ctx"] == 8192


def test_write_value_keeps_other_settings_and_refuses_bad_ones(tmp_path):
    path = tmp_path / "sub" / "c.toml"
    config.write_value("chat.analysis_workers", "5", path=path)
    config.write_value("analysis.worker_timeout_s", 30, path=path)
    s = config.load(path=path, env={})
    assert s["chat.analysis_workers"] == 5 and s["analysis.worker_timeout_s"] == 30.0
    before = path.read_text()
    with pytest.raises(ConfigError, match="accepted 0–8"):
        config.write_value("chat.analysis_workers", 9, path=path)
    assert path.read_text() == before
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


def test_schema_lists_every_key_with_its_accepted_values():
    items = {item["name"]: item for item in json.loads(json.dumps(config.schema()))}
    assert set(items) == set(config.KEYS)
    workers = items["chat.analysis_workers"]
    assert (workers["minimum"], workers["maximum"], workers["default"], workers["env"]) == (
        0, 8, 2, "BOUNDCTX_CHAT_ANALYSIS_WORKERS")
    assert items["analysis.worker_timeout_s"]["exclusive_minimum"] is True


def test_the_config_command_shows_gets_sets_and_prints_the_schema(capsys, monkeypatch):
    assert main(["config", "set", "chat.analysis_workers", "0"]) == 0
    assert "chat.analysis_workers = 0" in capsys.readouterr().out
    monkeypatch.setenv("BOUNDCTX_CHAT_N_CTX", "2048")
    assert main(["config", "get", "chat.n_ctx"]) == 0
    assert capsys.readouterr().out.strip() == "2048"
    assert main(["config", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["chat.analysis_workers"]["value"] == 0 and shown["chat.analysis_workers"]["source"].startswith("file ")
    assert shown["chat.n_ctx"] == {"value": 2048, "source": "environment BOUNDCTX_CHAT_N_CTX"}
    assert main(["config", "schema"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(config.KEYS)
    assert main(["config", "set", "chat.analysis_workers", "12"]) == 2
    assert "accepted 0–8" in capsys.readouterr().err
    monkeypatch.setenv("BOUNDCTX_CHAT_N_CTX", "lots")
    assert main(["config", "show"]) == 2
    assert "is not an int" in capsys.readouterr().err


def test_a_misspelt_environment_variable_is_warned_about_with_the_near_name():
    from boundctx.errors import UnknownVariableWarning

    config._warned.discard("BOUNDCTX_CHAT_ANALYSIS_WORKRS")
    with pytest.warns(UnknownVariableWarning, match="did you mean BOUNDCTX_CHAT_ANALYSIS_WORKERS"):
        settings = config.load(env={"BOUNDCTX_CHAT_ANALYSIS_WORKRS": "3"})
    assert settings["chat.analysis_workers"] == 2  # ignored, and said so


def test_variables_boundctx_reads_that_are_not_settings_are_not_warned_about(recwarn):
    config.load(env={name: "x" for name in config.ENVIRONMENT} | {"BOUNDCTX_CHAT_N_CTX": "1024"})
    assert not recwarn.list


def test_the_cli_shows_an_unknown_variable_warning_on_stderr(monkeypatch, capsys):
    config._warned.discard("BOUNDCTX_NOPE")
    monkeypatch.setenv("BOUNDCTX_NOPE", "1")
    assert main(["config", "show"]) == 0
    assert "BOUNDCTX_NOPE is not a boundctx setting" in capsys.readouterr().err


def test_an_unknown_variable_is_warned_about_once_per_process(recwarn):
    config._warned.discard("BOUNDCTX_ONCE_ONLY")
    config.load(env={"BOUNDCTX_ONCE_ONLY": "1"})
    config.load(env={"BOUNDCTX_ONCE_ONLY": "1"})
    assert [str(w.message).split(" is ")[0] for w in recwarn.list] == ["the environment variable BOUNDCTX_ONCE_ONLY"]


def test_the_variables_boundctx_reads_besides_settings_are_known_by_name(recwarn):
    config.load(env={"BOUNDCTX_CONFIG": "/nowhere.toml", "BOUNDCTX_CACHE_DIR": "/tmp", "BOUNDCTX_API_KEY": "k"})
    assert not recwarn.list


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_config_file_that_is_a_fifo_or_a_device_is_refused_without_blocking(tmp_path, special):
    import resource
    import subprocess
    import sys

    from tests._support import special_input

    path, said = special_input(tmp_path, special, "config.toml")
    code = ("import sys\nfrom boundctx import config\nfrom boundctx.errors import ConfigError\n"
            "try:\n    config.load(path=sys.argv[1], env={})\nexcept ConfigError as exc:\n    print(exc)\n")
    # A child with a time limit and a 4 GiB address space: a regression fails, not hangs.
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)))
    assert out.returncode == 0 and said in out.stdout and repr(path) in out.stdout, (out.stdout, out.stderr)
    assert config.load(path=os.devnull, env={})["chat.n_ctx"] == config.KEYS["chat.n_ctx"].default  # still "no file"


def test_every_setting_has_a_label_a_person_reads_and_the_schema_carries_it():
    labels = [key.label for key in config.KEYS.values()]
    assert all(label and label[0].isupper() and "." not in label.replace("(", "") for label in labels), labels
    assert len(set(labels)) == len(labels)  # two settings never read the same on a screen
    assert [item["label"] for item in config.schema()] == labels
    assert not any("decision 0" in key.help for key in config.KEYS.values())  # words for a user, not the design log
