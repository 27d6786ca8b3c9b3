"""The server's settings as a Settings screen reads and changes them.

Routes::

    GET   /boundctx/v1/settings/schema     every key: type, default, accepted values, help
    GET   /boundctx/v1/settings            the schema with each key's value, source and
                                           whether it can change while serving; ``shared``:
                                           whether a change applies in every process
    PATCH /boundctx/v1/settings            {"chat.analysis_workers": 0, ...}; null puts a
                                           key back to what it was when the server started

A change is checked exactly as a config file's value is (type, range, closed set; the
message says what is accepted), all keys of one request or none, and applies from the
next reply on; replies already running keep the settings they started with. With the
sessions in a folder it lives in this server process only (a restart, or another
``boundctx serve`` on the folder, has the configured values): ``boundctx config set`` is
what persists. With the sessions in a database it is kept there and applies in every
process on it, one started later included, until a ``PATCH`` puts the key back
(:mod:`boundctx.serve.coordination`).

What the server was built from cannot change while it runs: ``serve.*`` (the socket,
the keys, the sessions folder, the queue), ``chat.n_ctx``, ``chat.provider``, ``local.*``
(the loaded model) and ``remote.*`` (the model server). Those are refused with the reason.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from boundctx import config
from boundctx.errors import ConfigError, StoreUnavailable
from boundctx.serve.http import API, ApiError, read_json, store_unavailable
from boundctx.serve.http import json_response as _json
from boundctx.serve.requests import BadRequest, decode

if TYPE_CHECKING:  # coordination builds on LiveSettings, defined here
    from boundctx.serve.coordination import Coordination

__all__ = ["SOURCE", "LiveSettings", "SettingRefused", "fixed_while_serving", "merged_overrides", "settings_routes",
           "with_values"]

SOURCE = "PATCH /boundctx/v1/settings"
_FIXED_KEYS = frozenset({"chat.n_ctx", "chat.provider"})
_FIXED_GROUPS = ("serve.", "local.", "remote.")


def fixed_while_serving(name: str) -> bool:
    """Whether ``name`` shaped the server itself (read once, at start)."""
    return name in _FIXED_KEYS or name.startswith(_FIXED_GROUPS)


def with_values(settings: config.Settings, values: Mapping[str, Any], source: str) -> config.Settings:
    """``settings`` with ``values`` (already checked) over them, said to come from ``source``."""
    merged = dict(settings)
    sources = {name: settings.source(name) for name in merged}
    for name, value in values.items():
        merged[name], sources[name] = value, source
    return config.Settings(merged, sources)


def merged_overrides(overrides: Mapping[str, Any], checked: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` with the checked ``changes`` made: a value sets its key, None takes the
    key's override away (back to the value the server started with)."""
    merged = dict(overrides)
    for name, value in checked.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


class SettingRefused(ConfigError):
    """A change the server does not take; ``name`` is the key."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class LiveSettings:
    """The server's current settings: the ones it started with, with the changes made
    through the API (:attr:`overrides`) over them. ``current`` is swapped whole, so a
    reply that read it once sees one consistent set.

    Where the overrides live is its caller's: this process alone (:meth:`patch`), or a
    database every process of a deployment shares (:mod:`boundctx.serve.coordination`,
    which checks a change here, stores it, and has every process :meth:`adopt` it).
    """

    def __init__(self, started: config.Settings) -> None:
        self.started = started
        self.current = started
        #: The values the API set, by key (checked; each differs from ``started`` or not).
        self.overrides: dict[str, Any] = {}
        self._lock = threading.Lock()

    def patch(self, changes: Mapping[str, Any]) -> config.Settings:
        """Apply ``changes`` (all or none) in this process.

        Raises
        ------
        SettingRefused
            An unknown key, a key fixed while serving, a value the key does not accept, or
            values that do not go together (``config.RELATIONS``, checked on the settings
            the change would make).
        """
        checked = self.check(changes)
        with self._lock:
            overrides = merged_overrides(self.overrides, checked)
            self.current = self.compose(overrides, about=checked)
            self.overrides = overrides
            return self.current

    def check(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """``changes`` with each value checked as a config file's is (None stays None:
        the key goes back to the value the server started with).

        Raises
        ------
        SettingRefused
        """
        checked: dict[str, Any] = {}
        for name, value in changes.items():
            if name not in config.KEYS:
                raise SettingRefused(name, f"{name!r} is not a setting; GET {API}/settings/schema lists them")
            if fixed_while_serving(name):
                raise SettingRefused(name, f"{name} is read when boundctx serve starts and cannot change while "
                                           "it runs; set it in the config file, the environment or a flag, and "
                                           "restart")
            try:
                checked[name] = None if value is None else config.KEYS[name].check(value, "this change", parse=False)
            except ConfigError as exc:
                raise SettingRefused(name, str(exc)) from None
        return checked

    def compose(self, overrides: Mapping[str, Any], *, about: Collection[str] = ()) -> config.Settings:
        """The settings ``overrides`` make over the ones the server started with, their
        relations checked (a refusal names one of the keys ``about``, the ones a change
        asked for, where it can).

        Raises
        ------
        SettingRefused
        """
        values = dict(self.started)
        sources = {name: self.started.source(name) for name in values}
        for name, value in overrides.items():
            values[name], sources[name] = value, SOURCE
        settings = config.Settings(values, sources)
        try:
            config.check_relations(settings, settings.source)
        except ConfigError as exc:
            # The param names a key of this request (the other may be one it left alone).
            keys = [k for k in exc.keys if k in about] or list(about) or list(exc.keys) or [""]
            raise SettingRefused(keys[0], str(exc)) from None
        return settings

    def adopt(self, overrides: Mapping[str, Any]) -> config.Settings:
        """Run with exactly ``overrides`` (each value already checked, e.g. by the process
        that took the change) from the next reply on: composed over this process's own
        start settings, SettingRefused leaving the current ones as they were."""
        with self._lock:
            self.current = self.compose(overrides)
            self.overrides = dict(overrides)
            return self.current

    def view(self) -> dict[str, Any]:
        settings = self.current
        data = [{**item, "value": settings[item["name"]], "source": settings.source(item["name"]),
                 "writable": not fixed_while_serving(item["name"])} for item in config.schema()]
        return {"object": "boundctx.settings", "data": data}


def settings_routes(coordination: Coordination, max_body: int) -> list:
    """The settings routes, relative to :data:`~boundctx.serve.http.API`: the settings of
    ``coordination.live``, changed through ``coordination`` (in this process, or, shared
    by every process on a sessions database, off the event loop and with a lost database
    a 503)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.routing import Route

    live, shared = coordination.live, coordination.shared

    def changes_of(body: bytes) -> dict[str, Any]:
        try:
            changes = decode(body, dict[str, Any])
        except BadRequest as exc:
            raise BadRequest(f"{exc}; send a JSON object of settings to change", code="invalid_json") from None
        if not changes:
            raise BadRequest('the body must be a JSON object of settings to change, e.g. '
                             '{"chat.analysis_workers": 0}', code="invalid_settings")
        return changes

    async def schema(request):
        return _json(200, {"object": "boundctx.settings_schema", "data": config.schema()})

    def view() -> dict[str, Any]:
        # ``shared``: whether a change applies in every process on the sessions database.
        return {**live.view(), "shared": shared}

    async def settings(request):
        if request.method == "GET":
            return _json(200, view())
        changes = await read_json(request, max_body, changes_of)
        try:
            if shared:
                await run_in_threadpool(coordination.patch, changes)
            else:
                coordination.patch(changes)
        except SettingRefused as exc:
            raise ApiError(400, str(exc), "invalid_setting", exc.name) from None
        except StoreUnavailable as exc:
            raise store_unavailable(f"the change was not made: {exc}") from None
        return _json(200, view())

    return [
        Route("/settings/schema", schema, methods=["GET"]),
        Route("/settings", settings, methods=["GET", "PATCH"]),
    ]
