"""Understanding on the embedded model: grammars built per turn hold under a real
sampler, and the budget accounts for what the model really spent. What the tiny model
answers is its own business; the shape and the accounting are ours."""

import pytest

from boundctx import config
from boundctx.understanding import Catalog, Understander

from tests._support.booking import MESSAGE, RECORDS, catalog

pytestmark = pytest.mark.slow

#: Problems only a decoder that ignored its grammar could cause.
STRUCTURAL = ("not JSON", "unexpected field", "missing field", "is not one of", "expected ")


@pytest.fixture(scope="module")
def local():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")
    from boundctx.providers.local import LlamaCppProvider
    provider = LlamaCppProvider(n_ctx=2048)
    yield provider
    provider.close()


def test_every_output_keeps_its_per_turn_schema_and_the_budget_adds_up(local):
    settings = config.load(env={}, overrides={"understanding.max_parallel": 2, "understanding.max_model_calls": 12})
    u = Understander(local, catalog(), settings=settings)
    plan = u.understand(MESSAGE, records=RECORDS)
    attempts = u.log.attempts
    assert attempts and plan.budget.model_calls == len(attempts)
    for a in attempts:
        if a.finish_reason == "stop":
            assert not any(p.startswith(STRUCTURAL) or f": {STRUCTURAL[0]}" in p for p in a.problems), a
    # Local counts are exact: the turn's prompt tokens are the sum of its calls'.
    assert plan.budget.prompt_tokens == sum(a.prompt_tokens for a in attempts)
    assert plan.budget.completion_tokens == sum(a.completion_tokens for a in attempts)
    assert plan.status in ("ready", "needs_input", "incomplete", "nothing", "failed_closed")


def test_the_single_call_baseline_on_a_bfcl_catalog(local):
    functions = [
        {"name": "spotify.play", "description": "Play tracks from an artist for a duration.", "parameters": {
            "type": "dict", "properties": {"artist": {"type": "string", "description": "the artist"},
                                           "duration": {"type": "integer", "description": "minutes"}},
            "required": ["artist", "duration"]}}]
    settings = config.load(env={}, overrides={"understanding.max_model_calls": 4})
    u = Understander(local, Catalog.from_bfcl(functions), settings=settings)
    plan = u.single_call("Play Taylor Swift for 20 minutes and Maroon 5 for 15 minutes.")
    assert plan.budget.model_calls >= 1
    for a in u.log.attempts:
        if a.finish_reason == "stop":
            assert not any(p.startswith(STRUCTURAL) for p in a.problems), a
    for act in plan.acts:
        assert act.operation == "spotify.play"
        assert all(isinstance(v, int) for k, v in act.arguments.items() if k == "duration")
