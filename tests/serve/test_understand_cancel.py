"""``/understand`` after its client leaves (issue 22, finding 6): the model call in flight
stops, no call starts after it, and the reply slot is free again at once, instead of
the turn running to its call and time bounds while it holds the slot."""

import json
import socket
import threading
import time

import msgspec

from boundctx.providers import Finish, ScriptedProvider, ScriptedReply
from boundctx.understanding import Catalog, Understander

from tests._support.booking import CATALOG, GOLD, MESSAGE, RECORDS
from tests._support.oracle import Oracle

#: A call of the slow model takes at least this long (its answer comes a piece at a time):
#: far longer than a cancelled turn needs to end, so the order of events, not a clock,
#: tells whether the cancel worked.
CALL_S = 30.0


class SlowModel:
    """A perfect model that streams each answer in ``pieces`` over ``call_s`` seconds;
    it counts its calls and notes when each piece was produced."""

    def __init__(self, call_s=CALL_S, pieces=300):
        self.oracle = Oracle(GOLD, RECORDS)
        self.call_s, self.pieces = call_s, pieces
        self.calls = 0
        self.started = threading.Event()
        self.produced_at: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, request):
        text = self.oracle(request)
        with self.lock:
            self.calls += 1
        size = -(-len(text) // self.pieces)
        gap = self.call_s / self.pieces

        def stream():
            self.started.set()
            for i in range(0, len(text), size):
                time.sleep(gap)
                self.produced_at.append(time.monotonic())
                yield text[i:i + size]
        return stream()


def in_use(server) -> tuple[int, int]:
    """The server's replies (generating, waiting), as ``/v1/models`` says them."""
    import httpx

    replies = httpx.get(server.url + "/v1/models", timeout=10).json()["data"][0]["meta"]["replies"]
    return replies["generating"], replies["waiting"]


def test_a_client_that_leaves_stops_the_turn_at_the_call_in_flight_and_frees_its_slot(serve):
    import httpx

    model = SlowModel()
    server = serve(ScriptedProvider(model), settings={"analysis.notes_max_tokens": 256}, model_id="boundctx-test")
    body = json.dumps({"message": MESSAGE, "catalog": CATALOG, "records": msgspec.to_builtins(RECORDS)}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /boundctx/v1/understand HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert model.started.wait(30)  # the first call is streaming
    assert in_use(server) == (1, 0)
    sock.close()
    # The slot comes back before the call in flight would have ended on its own (the
    # turn's thread frees it as its last act, so the turn is over by then).
    deadline = time.monotonic() + CALL_S
    while in_use(server) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert in_use(server) == (0, 0), "the turn still holds its slot"
    produced = len(model.produced_at)
    assert produced < model.pieces, "the call in flight ran to its end"
    time.sleep(0.5)
    assert len(model.produced_at) == produced  # that call stopped
    assert model.calls == 1  # and no model call came after it
    # The same server runs the next turn to its end.
    model.call_s = 0.0
    r = httpx.post(server.url + "/boundctx/v1/understand", content=body,
                   headers={"Content-Type": "application/json"}, timeout=120)
    assert r.status_code == 200 and r.json()["status"] == "ready", r.text
    assert in_use(server) == (0, 0)


def test_a_call_that_ends_cancelled_ends_the_turn_with_no_repair_and_a_notice():
    calls = []

    def cancelled_first(request):
        calls.append(request)
        return ScriptedReply('{"units": [', "cancelled")

    u = Understander(ScriptedProvider(cancelled_first), Catalog.from_dict(CATALOG))
    plan = u.understand(MESSAGE, records=RECORDS)
    assert len(calls) == 1  # neither repaired nor retried
    assert plan.status == "failed_closed" and not plan.acts
    assert [n.kind for n in plan.notices] == ["not_understood"] and "cancelled" in plan.notices[0].message
    assert plan.budget.model_calls == 1
    # The replay log holds the cancelled call, and the turn replays to the same plan.
    from boundctx.understanding import replay_turn

    assert [a.finish_reason for a in u.log.attempts] == ["cancelled"]
    replayed = replay_turn(u.log, plan.turn, Catalog.from_dict(CATALOG))  # its plan's hash is checked too
    assert (replayed.status, replayed.notices) == (plan.status, plan.notices)


def test_the_replys_cancel_token_stops_a_call_that_carries_its_own_and_no_call_starts_after():
    from boundctx.serve.replies import GatedProvider, Slots

    slots_ = Slots(1, 0)
    cancel = threading.Event()
    calls = []

    def respond(request):
        calls.append(request)
        for piece in ("one ", "two ", "three"):
            if len(calls) == 2:
                cancel.set()  # the client leaves while the second call streams
            yield piece

    gated = GatedProvider(ScriptedProvider(respond), slots_.admit(), cancel)
    own = threading.Event()  # a caller's own token, never set: the reply's still stops the call
    ask = [{"role": "user", "content": "x"}]
    assert list(gated.stream_chat(ask, cancel=own))[-1].reason == "stop"
    second = list(gated.stream_chat(ask, cancel=own))
    assert second[-1].reason == "cancelled" and len(second) < 4  # stopped before it was done
    assert list(gated.stream_chat(ask, cancel=own)) == [Finish("cancelled")]  # and no call starts
    assert len(calls) == 2
