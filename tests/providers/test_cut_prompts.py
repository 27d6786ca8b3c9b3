"""A server that cuts a prompt is caught (decision 0043).

The server here cuts as Ollama does past its num_ctx: it keeps the prompt's end, answers
200 and reports the tokens it kept. It is llama-server's stand-in (the embedded model's
own tokenizer and template) with a chat route that cuts, reached by the real remote
provider over loopback, with the exact count (llama-server's /tokenize) and with only the
byte estimate (a server that does not say how it tokenizes)."""

import contextlib
import pathlib

import pytest

pytest.importorskip("llama_cpp")

from boundctx import config  # noqa: E402
from boundctx.analysis import Engine  # noqa: E402
from boundctx.events import CutPrompt, Done  # noqa: E402
from boundctx.providers.remote import OpenAICompatibleProvider  # noqa: E402
from boundctx.tokens.base import fewest_tokens  # noqa: E402
from boundctx.tokens.server import LlamaServerCounter  # noqa: E402

from tests._support.llama_server_double import LlamaServerDouble  # noqa: E402

KEEP = 400  # the server's num_ctx


@contextlib.contextmanager
def cutting_server(*, exact: bool):
    double = LlamaServerDouble(keep_tokens=KEEP)
    url = double.start()
    try:
        counter = LlamaServerCounter(url, timeout=10) if exact else None
        with contextlib.closing(OpenAICompatibleProvider(url, model="m", context_window=16384,
                                                         counter=counter)) as provider:
            yield double, provider
        if counter is not None:
            counter.close()
    finally:
        double.stop()


def ask(provider, words: int) -> Done:
    question = " ".join(f"w{i}" for i in range(words)) + "\nWhat is the last word?"
    settings = config.load(env={}, overrides={"chat.n_ctx": 16384, "chat.analysis_workers": 0})
    events = list(Engine(provider, settings=settings, max_reply_tokens=64).reply(
        [{"role": "user", "content": question}]))
    assert isinstance(events[-1], Done), events[-1]
    return events[-1]


@pytest.mark.parametrize("exact", [True, False], ids=["exact count", "estimate"])
def test_no_cut_prompt_goes_unflagged_over_a_sweep_of_prompt_sizes(exact):
    """Exact: every cut is flagged and nothing else. Estimate: nothing uncut is flagged,
    and every cut is flagged once the prompt's words alone are more than the server
    kept (below that, the estimate cannot prove a cut: the decision says so)."""
    with cutting_server(exact=exact) as (double, provider):
        missed_provable = 0
        for words in (10, 100, 150, 190, 250, 400, 800, 1600, 2000):
            before = double.cut
            done = ask(provider, words)
            was_cut = double.cut > before
            if not was_cut:
                assert done.cut_prompts == [], words
                continue
            provable = exact or words + 5 > KEEP  # the question's own words come on top
            if done.cut_prompts:
                (cut,) = done.cut_prompts
                assert cut.call == "answer" and cut.evaluated == KEEP < cut.sent_at_least, (words, cut)
            elif provable:
                missed_provable += 1
        assert double.cut >= 6 and missed_provable == 0


def test_the_estimates_floor_never_passes_the_real_count_and_catches_an_ollama_sized_cut():
    """The floor is below the real count for prose, logs and JSON alike, so it never
    flags a prompt that was not cut; a prompt cut to a quarter of its words is caught."""
    from boundctx.tokens.llama import LlamaCounter

    real = LlamaCounter()
    log = (pathlib.Path(__file__).resolve().parents[2] / "examples" / "build.log").read_text(encoding="utf-8")
    for text in (log, "Hello there, how are you? " * 200, '{"id": 7, "tags": ["a", "b"]} ' * 300, "x" * 5000,
                 "路径 テスト 😀 " * 200, "a\x1cb\x1dc " * 100):
        messages = [{"role": "user", "content": text}]
        assert fewest_tokens(messages) <= real.count_prompt(messages), text[:30]
    assert fewest_tokens([{"role": "user", "content": log}]) > real.count_prompt(
        [{"role": "user", "content": log}]) // 4


def test_ask_says_each_cut_prompt_on_stderr_and_in_its_json_done_event(tmp_path):
    """The real command against the server that cuts: the answer is printed, and a line
    says the server cut the answer's prompt (what it kept, of what was sent)."""
    import json
    import subprocess
    import sys

    double = LlamaServerDouble(keep_tokens=KEEP)
    url = double.start()
    question = " ".join(f"w{i}" for i in range(1500)) + "\nWhat is the last word?"
    try:
        base = [sys.executable, "-m", "boundctx", "ask", "--provider", "remote", "--base-url", url, "--n-ctx", "16384",
                "--analysis-workers", "0", "--max-tokens", "16"]
        said = subprocess.run([*base, question], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              stdin=subprocess.DEVNULL)
        as_json = subprocess.run([*base, "--json", question], capture_output=True, text=True, timeout=120,
                                 cwd=tmp_path, stdin=subprocess.DEVNULL)
    finally:
        double.stop()
    assert said.returncode == 0 and said.stdout.strip() == "ok", said.stderr
    assert f"the server evaluated {KEEP} prompt tokens of the answer's " in said.stderr, said.stderr
    done = json.loads(as_json.stdout.splitlines()[-1])
    (cut,) = done["cut_prompts"]
    assert done["type"] == "done" and cut["call"] == "answer" and cut["evaluated"] == KEEP < cut["sent_at_least"]


def test_the_openai_route_carries_a_cut_prompt_in_its_done_extension():
    from boundctx.cli.ask import cut_prompt_warning

    said = cut_prompt_warning(CutPrompt("worker", 2400, 400))
    assert "evaluated 400 prompt tokens of the worker's 2,400 or more" in said and "num_ctx" in said
    from boundctx.serve.openai_routes import _done_extension

    ext = _done_extension(Done("stop", {"prompt_tokens": 400}, cut_prompts=[CutPrompt("answer", 2400, 400)]))
    assert ext["cut_prompts"] == [{"call": "answer", "sent_at_least": 2400, "evaluated": 400}]
    assert "cut_prompts" not in _done_extension(Done("stop"))


def test_a_report_of_zero_or_of_only_the_uncached_tokens_is_not_a_cut():
    from boundctx.providers.base import Finish

    assert Finish("stop", 400, 1, prompt_floor=900).cut
    assert not Finish("stop", 0, 1, prompt_floor=900).cut  # nothing reported
    assert not Finish("stop", 100, 1, cached_tokens=850, prompt_floor=900).cut  # the rest was cached
    assert not Finish("stop", 400, 1, usage_estimated=True, prompt_floor=900).cut  # our own count, not the server's
    assert not Finish("stop", 400, 1).cut  # a local model: no floor
