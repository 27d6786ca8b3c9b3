"""Every setting's accepted range is what the code that reads it takes (issue 22, finding
12): a value a reader would refuse (the section planner, a lock's wait, llama.cpp's
32-bit fields, the window route, JSON) is refused where it is set, with the key and the
range, and a reply at the extremes that are accepted ends as a reply or as ``Failed``,
never as a raised exception or a server's traceback."""

import math
import sys
import threading

import msgspec
import pytest

from boundctx import config
from boundctx.analysis import Engine
from boundctx.analysis.workers import WORKER_INSTRUCTIONS
from boundctx.errors import ConfigError
from boundctx.events import Done, Failed, Fitted
from boundctx.providers import ScriptedProvider

NUMBERS = sorted(name for name, key in config.KEYS.items() if key.type in ("int", "float"))
#: Float keys whose reader takes any finite value (1 / max_hz is a gap in seconds).
ANY_FINITE = {"serve.progress_max_hz"}

LOG = "".join(f"2026-11-30 step {i:04d}: {'ok' if i != 377 else 'FAILED id=7f3a9c11'}\n" for i in range(1500))
ASK = [{"role": "user", "content": "Which step failed?\n\n" + LOG}]  # far larger than the window


def answer(request):
    if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
        return "step 377: FAILED id=7f3a9c11 [S1 0-10]" if "FAILED" in request.messages[-1]["content"] else ""
    return "Step 377 failed."


def lowest(key: config.Key):
    """The least value ``key`` accepts."""
    if not key.exclusive_minimum:
        return key.minimum
    return key.minimum + 1 if key.type == "int" else math.nextafter(key.minimum, math.inf)


def highest(key: config.Key):
    """The largest value ``key`` accepts (the largest finite float for one with no maximum)."""
    return key.maximum if key.maximum is not None else sys.float_info.max


def beyond(key: config.Key):
    """The least value past ``key``'s maximum."""
    return key.maximum + 1 if key.type == "int" else math.nextafter(key.maximum, math.inf)


def with_partners(name: str, value) -> dict:
    """``{name: value}``, with the other key of a relation moved as far as the value needs
    (a notes bound at its maximum needs the largest worker context)."""
    over = {name: value}
    for key, other, most, least, _ in config.RELATIONS:
        if name == key and value > most(config.KEYS[other].default):
            over[other] = least(value)
        elif name == other and config.KEYS[key].default > most(value):
            over[key] = most(value)
    return over


def toml(values: dict) -> str:
    groups: dict[str, list[str]] = {}
    for name, value in values.items():
        group, short = name.split(".", 1)
        groups.setdefault(group, []).append(f"{short} = {value!r}")
    return "".join(f"[{group}]\n" + "".join(line + "\n" for line in lines) for group, lines in groups.items())


EXTREMES = [(name, end) for name in NUMBERS for end in ("lowest", "highest")]


def extreme(name: str, end: str):
    key = config.KEYS[name]
    return lowest(key) if end == "lowest" else highest(key)


def test_every_count_has_a_maximum_a_reader_takes():
    for name in NUMBERS:
        key = config.KEYS[name]
        if key.type == "float" and name in ANY_FINITE:
            continue
        assert key.maximum is not None, f"{name} has no maximum"
        # The settings route and `config show --json` write every value as JSON.
        assert msgspec.json.decode(msgspec.json.encode(key.maximum)) == key.maximum
        if key.type == "int":
            assert key.maximum <= sys.maxsize, name
    # A lock takes the longest time limit as a wait, and refuses one a second longer.
    lock = threading.Lock()
    assert lock.acquire(timeout=config.MAX_SECONDS)
    lock.release()
    with pytest.raises(OverflowError):
        lock.acquire(timeout=config.MAX_SECONDS + 1)


def test_the_window_defaults_stop_at_the_window_routes_caps():
    assert config.KEYS["transcript.window_messages"].maximum == 1000
    assert config.KEYS["transcript.window_content_bytes"].maximum == 1 << 20


@pytest.mark.parametrize("name", [n for n in NUMBERS if config.KEYS[n].maximum is not None])
def test_a_value_past_the_maximum_is_refused_from_every_source_with_the_range(name, tmp_path):
    key = config.KEYS[name]
    bad = beyond(key)
    path = tmp_path / "c.toml"
    path.write_text(toml({name: bad}))
    for source in ({"overrides": {name: bad}}, {"env": {key.env: repr(bad)}}, {"path": path}):
        with pytest.raises(ConfigError, match="too large") as info:
            config.load(**{"env": {}, **source})
        assert name in str(info.value) and key.accepted() in str(info.value)


@pytest.mark.parametrize("name,end", EXTREMES)
def test_the_extremes_are_accepted_and_a_reply_at_them_ends_as_a_reply_or_failed(name, end, tmp_path):
    over = with_partners(name, extreme(name, end))
    settings = config.load(env={}, overrides=over)
    assert settings[name] == over[name]
    # From the environment and a file too, as the same values.
    assert config.load(env={config.KEYS[n].env: repr(v) for n, v in over.items()})[name] == over[name]
    path = tmp_path / "c.toml"
    path.write_text(toml(over))
    assert config.load(path=path, env={})[name] == over[name]
    events = list(Engine(ScriptedProvider(answer), settings=settings, max_reply_tokens=256).reply(ASK))
    assert isinstance(events[0], (Fitted, Failed)) and isinstance(events[-1], (Done, Failed))
    if isinstance(events[-1], Failed):
        assert events[-1].error and events[-1].kind != "ValueError"


@pytest.mark.parametrize("name,end", [e for e in EXTREMES if e[0].startswith("understanding.")])
def test_an_understanding_turn_at_the_extremes_ends_with_a_plan(name, end):
    from boundctx.understanding import Catalog, Understander

    from tests._support.booking import CATALOG, GOLD, MESSAGE, RECORDS
    from tests._support.oracle import Oracle

    settings = config.load(env={}, overrides=with_partners(name, extreme(name, end)))
    u = Understander(ScriptedProvider(Oracle(GOLD, RECORDS)), Catalog.from_dict(CATALOG), settings=settings)
    plan = u.understand(MESSAGE, records=RECORDS)
    assert plan.status in ("ready", "incomplete", "failed_closed")


def test_keys_that_do_not_go_together_are_refused_naming_both():
    cases = [({"analysis.worker_n_ctx": 512}, "analysis.notes_max_tokens", "analysis.worker_n_ctx"),
             ({"analysis.notes_max_tokens": 2048}, "analysis.notes_max_tokens", "analysis.worker_n_ctx"),
             ({"analysis.max_source_chars": 64}, "analysis.overlap_chars", "analysis.max_source_chars"),
             ({"analysis.overlap_chars": 10, "analysis.max_source_chars": 10}, "analysis.overlap_chars",
              "analysis.max_source_chars")]
    for over, first, second in cases:
        with pytest.raises(ConfigError, match="does not go with") as info:
            config.load(env={}, overrides=over)
        message = str(info.value)
        assert first in message and second in message and "accepted" in message and "(from " in message
    # Just inside: twice the notes under the worker context; the overlap under the longest source.
    config.load(env={}, overrides={"analysis.worker_n_ctx": 512, "analysis.notes_max_tokens": 255})
    config.load(env={}, overrides={"analysis.overlap_chars": 9, "analysis.max_source_chars": 10})
    with pytest.raises(ConfigError, match="notes_max_tokens ≤ 255 with that analysis.worker_n_ctx"):
        config.load(env={}, overrides={"analysis.worker_n_ctx": 512, "analysis.notes_max_tokens": 256})


def test_config_set_refuses_a_value_that_does_not_go_with_the_file(tmp_path):
    path = tmp_path / "c.toml"
    config.write_value("analysis.worker_n_ctx", 1024, path=path)
    config.write_value("analysis.notes_max_tokens", 511, path=path)  # twice that is under 1,024
    with pytest.raises(ConfigError, match="does not go with") as info:
        config.write_value("analysis.notes_max_tokens", 512, path=path)
    assert f"analysis.worker_n_ctx = 1024 (from file {path})" in str(info.value)
    assert config.load(path=path, env={})["analysis.notes_max_tokens"] == 511  # the file is as it was


def test_a_planner_refusal_ends_the_reply_as_failed_never_as_a_raised_value_error():
    # Settings built by hand skip every check; the planner's own refusal must still end
    # the reply the way every other failure does.
    checked = config.load(env={})
    values = {**checked, "analysis.max_sections": sys.maxsize + 1}
    settings = config.Settings(values, {name: "test" for name in values})
    events = list(Engine(ScriptedProvider(answer), settings=settings, max_reply_tokens=256).reply(ASK))
    assert isinstance(events[-1], Failed) and events[-1].kind == "SectionPlanError"
    assert "max_sections" in events[-1].error and "analysis.*" in events[-1].error


# -- at the level a user meets it: a real server ---------------------------------------------


def _completion(server):
    import httpx

    r = httpx.post(server.url + "/v1/chat/completions", timeout=120,
                   json={"model": "boundctx-test", "messages": ASK, "max_tokens": 256})
    # A reply, or the error a failed reply is (its reason in the API's shape); never the
    # 500 of an exception that escaped, nor a traceback.
    assert "Traceback" not in r.text
    if r.status_code != 200:
        error = r.json()["error"]
        assert error["code"] != "internal_error" and error["message"], r.text
    return r


def test_patch_refuses_values_past_a_readers_range_and_a_reply_at_the_extremes_completes(serve):
    import httpx

    from boundctx.serve.settings import fixed_while_serving

    server = serve(ScriptedProvider(answer), settings={"analysis.notes_max_tokens": 256}, model_id="boundctx-test")
    url = server.url + "/boundctx/v1/settings"
    live = [n for n in NUMBERS if not fixed_while_serving(n)]
    for name in live:
        key = config.KEYS[name]
        if key.maximum is None:
            continue
        r = httpx.patch(url, json={name: beyond(key)})
        assert r.status_code == 400, (name, r.text)
        error = r.json()["error"]
        assert error["param"] == name and name in error["message"] and key.accepted() in error["message"]
    r = httpx.patch(url, json={"analysis.worker_n_ctx": 512})
    assert r.status_code == 400 and r.json()["error"]["param"] == "analysis.worker_n_ctx"
    assert "analysis.notes_max_tokens" in r.json()["error"]["message"]
    assert _completion(server).status_code == 200  # the refusals changed nothing
    for name in live:
        for end in ("lowest", "highest"):
            over = with_partners(name, extreme(name, end))
            r = httpx.patch(url, json=over)
            assert r.status_code == 200, (name, end, r.text)
            if name.startswith(("chat.", "analysis.")):  # what a reply reads
                _completion(server)
            assert httpx.patch(url, json=dict.fromkeys(over)).status_code == 200


def test_a_server_started_at_the_serve_extremes_streams_a_reply(serve):
    import httpx

    serving = {name: highest(config.KEYS[name]) for name in
               ("serve.max_body_bytes", "serve.sse_ping_seconds", "serve.send_timeout_seconds",
                "serve.progress_max_hz", "serve.active_replies", "serve.queue_depth")}
    server = serve(ScriptedProvider(answer), settings={"analysis.notes_max_tokens": 256, **serving},
                   model_id="boundctx-test")
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=120,
                      json={"model": "boundctx-test", "messages": ASK, "max_tokens": 256, "stream": True}) as r:
        body = r.read().decode()
    assert r.status_code == 200 and '"error"' not in body and '"finish_reason":"stop"' in body
    assert body.rstrip().endswith("data: [DONE]")
