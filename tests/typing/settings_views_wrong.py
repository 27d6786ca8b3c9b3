"""What mypy must refuse: a misspelt setting, a setting read as the wrong type, a view
changed in place. Each line that must fail says so (``# E: <what mypy says>``).

Checked by tests/config/test_setting_views.py (mypy on this file alone)."""

from boundctx import config


def misspelt(settings: config.Settings) -> int:
    return settings.chat.analysis_workrs  # E: "ChatSettings" has no attribute "analysis_workrs"


def wrong_group(settings: config.Settings) -> int:
    return settings.serve.n_ctx  # E: "ServeSettings" has no attribute "n_ctx"


def wrong_type(settings: config.Settings) -> str:
    return settings.serve.port  # E: Incompatible return value type (got "int", expected "str")


def changed(settings: config.Settings) -> None:
    settings.chat.n_ctx = 512  # E: Property "n_ctx" defined in "ChatSettings" is read-only
