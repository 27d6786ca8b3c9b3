"""What the serve tests share: a scripted model that reads a log in sections, settings
and an official client for a running server, a slow reply."""

import threading
import time

import openai

from boundctx import config
from boundctx.analysis.workers import WORKER_INSTRUCTIONS

MODEL = "boundctx-test"
LOG = "".join(f"2026-11-30 step {i:04d}: {'ok' if i != 377 else 'FAILED id=7f3a9c11'}\n" for i in range(1500))


def answer(request):
    """Workers note the failing line; the coordinator answers in pieces."""
    if request.messages[0]["content"] == WORKER_INSTRUCTIONS:
        body = request.messages[-1]["content"]
        return "step 377 FAILED id=7f3a9c11" if "FAILED" in body else ""
    return ["The ", "failing ", "step ", "is ", "377."]


def settings(**over):
    return config.load(env={}, overrides={"analysis.notes_max_tokens": 256, **over})


def client(server, key="none", **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, **kw)


ASK = [{"role": "user", "content": "Which step failed?"}]
# An agent's turn: the question, its own tool call, and a result far larger than the window.
WITH_LOG = ASK + [{"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": LOG}]


class Slow:
    """A reply of many pieces, one every ``gap`` seconds; counts what it produced."""

    def __init__(self, pieces=200, gap=0.01):
        self.pieces, self.gap = pieces, gap
        self.produced = 0
        self.started = threading.Event()

    def __call__(self, request):
        def gen():
            self.started.set()
            for i in range(self.pieces):
                time.sleep(self.gap)
                self.produced += 1
                yield f"w{i} "
        return gen()
