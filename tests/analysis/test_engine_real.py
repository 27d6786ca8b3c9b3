"""The engine on the embedded model, locally and through llama-cpp-python's server:
an input larger than a 2,048-token context is read in sections by two workers."""

import pathlib

import pytest

from boundctx import config
from boundctx.analysis import Engine
from boundctx.events import AnalysisProgress, Done

from servers import llama_cpp_server, missing_server_extra

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
