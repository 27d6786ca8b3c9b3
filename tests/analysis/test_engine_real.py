"""The engine on the embedded model, locally and through llama-cpp-python's server:
an input larger than a 2,048-token context is read in sections by two workers."""

import pathlib

import pytest

from boundctx import config
from boundctx.analysis import Engine
from boundctx.events import AnalysisProgress, Done

from tests._support.servers import llama_cpp_server, missing_server_extra

EXAMPLE = (pathlib.Path(__file__).resolve().parents[2] / "examples" / "build.log").read_text()
ASK = [{"role": "user", "content": "Which step failed, and what is its job id?"}]


@pytest.mark.slow
def test_the_engine_reads_a_long_input_through_the_remote_provider(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    missing = missing_server_extra()
    if missing:
        pytest.skip(f"llama-cpp-python's server extra is missing ({', '.join(missing)})")
    from boundctx.providers.remote import OpenAICompatibleProvider
    from boundctx.tokens.llama import LlamaCounter

    settings = config.load(env={}, overrides={"chat.n_ctx": 2048, "chat.analysis_workers": 2})
    with llama_cpp_server(tmp_path / "server.log", n_ctx=2048) as url:
        # The embedded model's own counter: exact for what this server renders.
        provider = OpenAICompatibleProvider(url, context_window=2048, counter=LlamaCounter())
        provider.supports_tools = False  # llama-cpp-python's server does not run SmolLM2 tools
        events = list(Engine(provider, settings=settings, max_reply_tokens=64).reply(
            ASK, files=[("build.log", EXAMPLE)]))
    progress = [e for e in events if isinstance(e, AnalysisProgress)]
    assert isinstance(events[-1], Done), events[-1]
    total = progress[0].sections
    assert total >= 2 and sorted(e.section for e in progress if e.phase == "noted") == list(range(1, total + 1))
    assert all(e.notes_tokens <= 384 for e in progress if e.phase == "noted")
    assert events[-1].usage["prompt_tokens"] > 0  # the coordinator ran; its words are the model's business
    assert events[-1].usage["prompt_tokens"] < LlamaCounter().count_text(EXAMPLE)


@pytest.mark.slow
def test_a_paste_read_by_workers_costs_the_history_nothing_before_or_after_it():
    # The workers run on the coordinator's model between two replies. The state cache
    # (decision 0030) gives the coordinator its history back, and the notes sit in the
    # paste's place (decision 0031): the analysed turn evaluates only its notes and
    # question, and the turn after only what follows the history.
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from boundctx.providers.local import LlamaCppProvider

    settings = config.load(env={}, overrides={"chat.n_ctx": 2048, "chat.analysis_workers": 1,
                                              "analysis.notes_max_tokens": 48, "analysis.worker_n_ctx": 2048,
                                              # The answering call is the first after the workers (no
                                              # reread step between): its kept tokens say what came back.
                                              "analysis.constrained_rereads": False})
    history = [m for i in range(4) for m in (
        {"role": "user", "content": f"What did release {i} of the build tool change? Keep it short."},
        {"role": "assistant", "content": f"Release {i} fixed the cache and the lock of the deploy job."})]
    log = EXAMPLE * 2  # about twice the window: read in sections
    with LlamaCppProvider(n_ctx=2048, n_threads=2) as provider:
        engine = Engine(provider, settings=settings, max_reply_tokens=8)

        def turn(messages, files=()):
            events = list(engine.reply(messages, files=files))
            assert isinstance(events[-1], Done), events[-1]
            return events[-1].usage, [e for e in events if isinstance(e, AnalysisProgress)]

        question = {"role": "user", "content": "Which step failed in this log?"}
        plain, _ = turn([*history[:-1]])  # the turn before: the model now holds this history
        pasted, progress = turn([*history, question], files=[("build.log", log)])
        assert progress  # the workers ran between the two calls
        assert pasted["cached_tokens"] >= plain["prompt_tokens"] - 4  # the history came back, not evaluated
        after, _ = turn([*history, question, {"role": "assistant", "content": "Step 3."},
                         {"role": "user", "content": "And its id?"}])
        # The history before the paste comes back; the file's message is not in this
        # prompt, so the pasted turn's question, its answer and the new question are evaluated.
        assert after["cached_tokens"] >= provider.count_prompt(history) - 8
        assert after["prompt_tokens"] - after["cached_tokens"] <= provider.count_prompt(
            [question, {"role": "assistant", "content": "Step 3."}, {"role": "user", "content": "And its id?"}]) + 8
