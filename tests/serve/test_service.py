"""The reply service and the guard on their own, without a socket: what every route
relies on (a reply admitted, started, cancelled by id; every refusal one ApiError), and
each guard piece alone."""

import asyncio
import threading
import time

import msgspec
import pytest

from boundctx.events import Done
from boundctx.providers import ScriptedProvider
from boundctx.serve.guard import BearerKeys, HostCheck, Origins
from boundctx.serve.http import ApiError
from boundctx.serve.service import ReplyService

from tests._support.scripted import settings

ASK = [{"role": "user", "content": "Say hello."}]


def service(respond=lambda request: ["Hello", " there."], **over) -> ReplyService:
    return ReplyService(ScriptedProvider(respond, context_window=2048), settings(**over), "m")


async def drain(run, first):
    events = [first]
    while True:
        for event in events:
            if isinstance(event, Done) or event is None:
                return event
        events = await run.next_events(None)


def test_a_reply_runs_to_its_end_and_is_forgotten_by_id_when_ended():
    s = service()

    async def go():
        run, first = await s.begin(ASK, reply_id="r1")
        done = await drain(run, first)
        s.end("r1")
        return done

    assert asyncio.run(go()).finish_reason == "stop"
    with pytest.raises(ApiError) as caught:
        asyncio.run(s.cancel("r1"))
    assert caught.value.status == 404 and caught.value.code == "reply_not_found"


def test_cancel_by_id_stops_the_reply_in_flight():
    release = threading.Event()

    def slow(request):
        def pieces():
            yield "one "
            release.wait(30)
            yield "two"
        return pieces()

    s = service(slow)

    async def go():
        run, first = await s.begin(ASK, reply_id="r2")
        await s.cancel("r2")
        release.set()
        done = await drain(run, first)
        s.end("r2")
        return done

    assert asyncio.run(go()).finish_reason == "cancelled"


def test_every_refusal_before_a_reply_is_an_api_error_with_its_status():
    s = service()

    async def begin(**kw):
        with pytest.raises(ApiError) as caught:
            await s.begin(kw.pop("messages", ASK), reply_id="x", **kw)
        return caught.value

    async def go():
        too_long = await begin(max_tokens=4096)
        assert (too_long.status, too_long.code, too_long.param) == (400, "context_length_exceeded", "max_tokens")
        bad_tool = await begin(tools=[{"type": "function", "function": {"name": ""}}])
        assert (bad_tool.status, bad_tool.param) == (400, "tools")
        overflow = await begin(messages=[{"role": "system", "content": "x " * 5000}] + ASK)
        assert overflow.status == 400 and overflow.code == "context_length_exceeded"
        assert msgspec.json.decode(overflow.response().body)["error"]["n_ctx"] == 2048
        # Nothing refused holds a slot: a reply that failed before its first output gives
        # its slot back as its thread ends, just after the refusal is raised.
        deadline = time.monotonic() + 10
        while s.slots.in_use != (0, 0) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert s.slots.in_use == (0, 0)

    asyncio.run(go())


def test_a_full_queue_is_a_503_with_retry_after():
    s = service(**{"serve.active_replies": 1, "serve.queue_depth": 0})
    held = s.admit()
    with pytest.raises(ApiError) as caught:
        s.admit()
    assert caught.value.status == 503 and caught.value.headers["Retry-After"] == "5"
    held.release()
    s.admit().release()


# -- the guard, one piece at a time ------------------------------------------------------------


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def call(app, path="/v1/models", method="GET", **headers):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path,
             "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return start["status"], dict((k.decode(), v.decode()) for k, v in start["headers"])


def test_host_check_answers_only_the_names_it_was_given():
    app = HostCheck(_ok, {"127.0.0.1", "localhost"})
    assert call(app, host="127.0.0.1:8000")[0] == 200
    assert call(app, host="rebound.example:8000")[0] == 403


def test_origins_refuse_other_sites_and_answer_cors_for_the_configured_ones():
    app = Origins(_ok, {"http://app.example"})
    assert call(app, host="127.0.0.1:8000")[0] == 200  # no Origin: not a browser
    assert call(app, host="127.0.0.1:8000", origin="http://127.0.0.1:8000")[0] == 200  # its own page
    assert call(app, host="127.0.0.1:8000", origin="http://evil.example")[0] == 403
    status, headers = call(app, host="127.0.0.1:8000", origin="http://app.example")
    assert status == 200 and headers["access-control-allow-origin"] == "http://app.example"
    status, headers = call(app, method="OPTIONS", host="127.0.0.1:8000", origin="http://app.example",
                           access_control_request_method="POST")
    assert status == 204 and "POST" in headers["access-control-allow-methods"]


def test_bearer_keys_ask_for_a_key_except_on_open_paths():
    app = BearerKeys(_ok, {"k1", "k2"}, lambda path: path == "/health")
    assert call(app)[0] == 401
    assert call(app, authorization="Bearer k2")[0] == 200
    assert call(app, authorization="Bearer k3")[0] == 401
    assert call(app, "/health")[0] == 200
    assert call(BearerKeys(_ok, set(), lambda path: False))[0] == 200


def test_the_per_reply_gate_describes_its_provider_as_the_provider_does():
    # Every public, non-method attribute of the provider contract is passed on: a new
    # capability added to Provider and not to DESCRIPTION would be the base's default here.
    import threading

    from boundctx.providers import ScriptedProvider
    from boundctx.providers.base import Provider
    from boundctx.serve.replies import GatedProvider, Slots

    declared = {name for name in vars(Provider) if not name.startswith("_") and not callable(vars(Provider)[name])
                and name != "DESCRIPTION"} | set(Provider.__annotations__)
    assert declared <= set(Provider.DESCRIPTION)
    provider = ScriptedProvider(lambda r: "ok", context_window=777)
    provider.supports_tool_choice = provider.serialises = True
    provider.supports_tools = provider.reports_usage = False
    gate = GatedProvider(provider, Slots(1, 1).admit(), threading.Event())
    assert all(getattr(gate, name) is getattr(provider, name) for name in Provider.DESCRIPTION)
