"""``boundctx config set`` changes only the key's own line(s): comments, blank lines, key
order and spelling of the rest of the file stay byte for byte."""

import os
import stat
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx import _tomledit, config
from boundctx.cli import main
from boundctx.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HAND_WRITTEN = """\
# boundctx settings, kept by hand
# (the second line of the heading)

[chat]
# the workers read what does not fit
analysis_workers = 3   # three is plenty here
  n_ctx=4096

[analysis]    # note-taking
worker_timeout_s = 30.0


# trailing remarks
"""


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text(HAND_WRITTEN)
    monkeypatch.setenv("BOUNDCTX_CONFIG", str(path))
    return path


def settings_of(path):
    return dict(config.load(path=path, env={}))


def set_by_cli(key, value, capsys):
    assert main(["config", "set", key, value]) == 0, capsys.readouterr().err
    return capsys.readouterr()


def test_setting_an_existing_key_changes_only_its_value(config_file, capsys):
    before = settings_of(config_file)
    set_by_cli("chat.n_ctx", "8192", capsys)
    assert config_file.read_text() == HAND_WRITTEN.replace("  n_ctx=4096\n", "  n_ctx=8192\n")
    assert settings_of(config_file) == {**before, "chat.n_ctx": 8192}


def test_a_comment_after_the_value_stays_on_its_line(config_file, capsys):
    set_by_cli("chat.analysis_workers", "5", capsys)
    assert config_file.read_text() == HAND_WRITTEN.replace(
        "analysis_workers = 3   # three is plenty here", "analysis_workers = 5   # three is plenty here")


def test_a_new_key_goes_after_the_last_key_of_its_table(config_file, capsys):
    before = settings_of(config_file)
    set_by_cli("chat.temperature", "0.7", capsys)
    assert config_file.read_text() == HAND_WRITTEN.replace("  n_ctx=4096\n", "  n_ctx=4096\n  temperature = 0.7\n")
    assert settings_of(config_file) == {**before, "chat.temperature": 0.7}


def test_a_key_of_a_new_table_goes_in_a_new_table_at_the_end(config_file, capsys):
    before = settings_of(config_file)
    set_by_cli("local.threads", "4", capsys)
    assert config_file.read_text() == HAND_WRITTEN + "\n[local]\nthreads = 4\n"
    assert settings_of(config_file) == {**before, "local.threads": 4}


@pytest.mark.parametrize("text", [
    'say "hi" \\ back\\slash',
    "a # is no comment = [x]",
    "two\nlines\r\nand a\ttab",
    "control \x01 and delete \x7f",
    "é ü 漢字 🙂",
    "'single' '''triple''' \"\"\"",
])
def test_a_value_that_needs_quoting_reads_back_as_itself(config_file, capsys, text):
    before = settings_of(config_file)
    set_by_cli("chat.system_prompt", text, capsys)
    assert settings_of(config_file) == {**before, "chat.system_prompt": text}
    written = config_file.read_text()
    assert written.startswith(HAND_WRITTEN.split("\n\n[analysis]")[0] + "\n  system_prompt = ")
    assert written.endswith("\n\n[analysis]" + HAND_WRITTEN.split("\n\n[analysis]")[1])
    # and set again, over the quoted value
    set_by_cli("chat.system_prompt", "plain", capsys)
    assert config_file.read_text() == HAND_WRITTEN.replace("  n_ctx=4096\n",
                                                          '  n_ctx=4096\n  system_prompt = "plain"\n')


def test_a_value_spread_over_lines_is_replaced_whole(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[chat]\nsystem_prompt = """\nfirst\n[not a table]\nn_ctx = 1\n"""  # long one\nn_ctx = 2048\n')
    config.write_value("chat.system_prompt", "short", path=path)
    assert path.read_text() == '[chat]\nsystem_prompt = "short"  # long one\nn_ctx = 2048\n'
    config.write_value("chat.n_ctx", 1024, path=path)
    assert path.read_text() == '[chat]\nsystem_prompt = "short"  # long one\nn_ctx = 1024\n'


def test_line_endings_a_missing_final_newline_and_dotted_keys_are_kept(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b"# windows\r\nchat.n_ctx = 4096\r\n\r\n[analysis]\r\nmax_sections = 8")
    config.write_value("chat.n_ctx", 2048, path=path)
    config.write_value("chat.temperature", 0.5, path=path)
    config.write_value("analysis.max_sections", 9, path=path)
    config.write_value("analysis.overlap_chars", 10, path=path)
    assert path.read_bytes() == (b"# windows\r\nchat.n_ctx = 2048\r\nchat.temperature = 0.5\r\n\r\n[analysis]\r\n"
                                 b"max_sections = 9\r\noverlap_chars = 10\r\n")


def test_a_new_file_gets_a_table_per_group_in_the_order_they_were_set(tmp_path):
    path = tmp_path / "sub" / "c.toml"
    config.write_value("chat.analysis_workers", "5", path=path)
    assert path.read_text() == "[chat]\nanalysis_workers = 5\n"
    config.write_value("analysis.worker_timeout_s", 30, path=path)
    assert path.read_text() == "[chat]\nanalysis_workers = 5\n\n[analysis]\nworker_timeout_s = 30.0\n"


def test_the_file_keeps_its_permissions(config_file, capsys):
    config_file.chmod(0o600)
    set_by_cli("chat.n_ctx", "2048", capsys)
    assert stat.S_IMODE(os.stat(config_file).st_mode) == 0o600


def test_a_file_that_cannot_be_changed_in_place_is_refused_and_left_as_it_was(tmp_path, monkeypatch, capsys):
    path = tmp_path / "c.toml"
    text = "# inline\nchat = { n_ctx = 4096 }   # all in one\n"
    path.write_text(text)
    with pytest.raises(ConfigError, match="inline table") as caught:
        config.write_value("chat.temperature", 0.5, path=path)
    message = str(caught.value)
    assert str(path) in message and "edit the file by hand" in message and "temperature = 0.5" in message
    monkeypatch.setenv("BOUNDCTX_CONFIG", str(path))
    assert main(["config", "set", "chat.n_ctx", "2048"]) == 2
    assert "inline table" in capsys.readouterr().err
    assert path.read_text() == text
    assert os.listdir(tmp_path) == ["c.toml"]


def test_what_is_written_is_toml_and_holds_every_value(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(HAND_WRITTEN)
    values = {"chat.low_water": 0.25, "chat.provider": "remote", "analysis.constrained_rereads": False,
              "local.gpu_layers": -1, "remote.base_url": "http://127.0.0.1:8080/v1", "chat.n_ctx": 1 << 20}
    for name, value in values.items():
        config.write_value(name, value, path=path)
    data = tomllib.loads(path.read_text())
    assert {f"{g}.{k}": v for g, t in data.items() for k, v in t.items()} == {
        "chat.analysis_workers": 3, "analysis.worker_timeout_s": 30.0, **values}
    assert path.read_text().startswith(HAND_WRITTEN.split("  n_ctx=")[0])


@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_any_text_is_written_as_a_toml_string_that_reads_back_as_itself(text):
    assert tomllib.loads(f"x = {_tomledit.render(text)}")["x"] == text


@given(st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False)))
def test_any_number_is_written_as_a_toml_value_that_reads_back_as_itself(value):
    back = tomllib.loads(f"x = {_tomledit.render(value)}")["x"]
    assert (type(back), back) == (type(value), value)


def test_no_config_file_is_never_written(tmp_path, monkeypatch, capsys):
    # os.devnull is read as "no config file"; a stand-in here, so a failure of this test
    # could never replace the real device
    null = tmp_path / "null"
    null.write_text("[chat]\nn_ctx = 1\n")
    monkeypatch.setattr(os, "devnull", str(null))
    monkeypatch.setenv("BOUNDCTX_CONFIG", str(null))
    with pytest.raises(ConfigError, match="BOUNDCTX_CONFIG"):
        config.write_value("chat.n_ctx", 2048)
    assert main(["config", "set", "chat.n_ctx", "2048"]) == 2
    assert "nothing can be stored there" in capsys.readouterr().err
    assert null.read_text() == "[chat]\nn_ctx = 1\n" and os.listdir(tmp_path) == ["null"]
