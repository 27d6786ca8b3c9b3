"""What mypy must accept: the typed views of resolved settings, each field its type.

Checked by tests/config/test_setting_views.py (mypy on this file alone)."""

from typing import Literal

from boundctx import config


def workers(settings: config.Settings) -> int:
    return settings.chat.analysis_workers


def body_limit(settings: config.Settings) -> int:
    return settings.serve.max_body_bytes


def low_water(settings: config.Settings) -> float:
    return settings.chat.low_water


def rereads(settings: config.Settings) -> bool:
    return settings.analysis.constrained_rereads


def buffers(settings: config.Settings) -> Literal["auto", "on", "off"]:
    return settings.local.extra_buffers


def window(settings: config.Settings) -> tuple[int, int]:
    return settings.transcript.window_messages, settings.transcript.window_content_bytes


def calls(settings: config.Settings) -> int:
    return settings.understanding.max_model_calls
