"""The typed views of settings (decision 0032): each group's struct is that group of
``config.KEYS``, and a type checker holds code to it."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import typing

import msgspec
import pytest

from boundctx import config
from boundctx.serve.settings import LiveSettings, with_values

TYPING = pathlib.Path(__file__).parents[1] / "typing"
ROOT = TYPING.parents[1]
_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def _groups() -> dict[str, list[tuple[str, config.Key]]]:
    groups: dict[str, list[tuple[str, config.Key]]] = {}
    for name, key in config.KEYS.items():
        group, field = name.split(".", 1)
        groups.setdefault(group, []).append((field, key))
    return groups


def test_there_is_one_view_per_group_of_keys_in_their_order():
    assert [view.group for view in config.VIEWS] == list(_groups())


@pytest.mark.parametrize("view", config.VIEWS, ids=lambda v: v.group)
def test_each_view_is_its_group_of_keys_name_for_name_and_type_for_type(view):
    keys = _groups()[view.group]
    fields = msgspec.structs.fields(view)
    assert [f.name for f in fields] == [field for field, _ in keys]
    for f, (_, key) in zip(fields, keys):
        # No default: a view is built from resolved settings only, so KEYS keeps the one.
        assert f.required, f"{key.name}: a view's field has no default of its own"
        if key.choices is not None:
            assert typing.get_origin(f.type) is typing.Literal, key.name
            assert typing.get_args(f.type) == key.choices, key.name
        else:
            assert f.type is _TYPES[key.type], key.name


def test_a_view_holds_the_resolved_values_and_follows_every_way_settings_are_made():
    settings = config.load(env={"BOUNDCTX_SERVE_MAX_BODY_BYTES": "4096"}, overrides={"chat.low_water": 1})
    assert settings.serve.max_body_bytes == settings["serve.max_body_bytes"] == 4096
    assert settings.chat.low_water == 1.0 and isinstance(settings.chat.low_water, float)
    for view in config.VIEWS:
        values = msgspec.structs.asdict(getattr(settings, view.group))
        assert values == {name.split(".", 1)[1]: value for name, value in settings.items()
                          if name.startswith(view.group + ".")}
    assert with_values(settings, {"chat.analysis_workers": 0}, "test").chat.analysis_workers == 0
    live = LiveSettings(settings)
    assert live.patch({"analysis.max_sections": 3}).analysis.max_sections == 3
    assert live.patch({"analysis.max_sections": None}).analysis.max_sections == settings.analysis.max_sections


def test_a_view_cannot_be_changed_in_place():
    with pytest.raises(AttributeError):
        config.load(env={}).chat.n_ctx = 512


def _mypy(path: pathlib.Path, cache: pathlib.Path) -> list[str]:
    # In a process of its own: mypy's in-process API raises the interpreter's recursion
    # limit for good, which changes what later tests in this process see (a TOML file
    # nested too deeply would parse).
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                          "--follow-imports=silent", "--cache-dir", str(cache), "--no-error-summary",
                          "--hide-error-context", str(path)], capture_output=True, text=True, timeout=600)
    assert not run.stderr, run.stderr
    return [line for line in run.stdout.splitlines() if ": error: " in line]


def test_mypy_accepts_settings_read_through_their_views(tmp_path_factory):
    assert _mypy(TYPING / "settings_views.py", tmp_path_factory.getbasetemp() / "mypy") == []


def test_mypy_refuses_a_misspelt_setting_a_wrong_type_and_a_change(tmp_path_factory):
    path = TYPING / "settings_views_wrong.py"
    expected = {n: said for n, line in enumerate(path.read_text().splitlines(), 1)
                if (said := line.partition("  # E: ")[2])}
    assert len(expected) == 4
    found = {}
    for error in _mypy(path, tmp_path_factory.getbasetemp() / "mypy"):
        m = re.match(r".*?:(\d+): error: (.*?)(?:  \[[a-z-]+\])?$", error)
        assert m, error
        found[int(m.group(1))] = m.group(2)
    assert found.keys() == expected.keys()
    for line, said in expected.items():
        assert found[line].startswith(said), (line, found[line])
