"""The local provider's state cache on the embedded model: conversations taking turns
on one model, and replies around one-off work, take their evaluated prefix back
instead of evaluating it again, and answer exactly as without the cache."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")

from boundctx.providers.local import KEEP_AT_LEAST, LlamaCppProvider  # noqa: E402


def chat(tag: str, exchanges: int) -> list[dict]:
    msgs = [{"role": "system", "content": f"You answer questions about the {tag} project in one sentence."}]
    for i in range(exchanges):
        msgs.append({"role": "user", "content": f"What did the {tag} team change in release {i}? Keep it short."})
        msgs.append({"role": "assistant", "content": f"Release {i} of {tag} fixed the parser and the build."})
    return msgs


def turns(provider, conversations, rounds):
    """Each conversation asks in turn; returns (text, prompt tokens, kept tokens, kept
    said before the call) per reply."""
    out = []
    for r in range(rounds):
        for msgs in conversations:
            msgs.append({"role": "user", "content": f"And what came after that, in round {r}?"})
            said = provider.reusable_prefix(msgs)
            reply = provider.chat(msgs, max_tokens=6, temperature=0)
            out.append((reply.text, reply.finish.prompt_tokens, reply.finish.cached_tokens, said))
            msgs.append({"role": "assistant", "content": reply.text or "Nothing."})
    return out


@pytest.fixture(scope="module")
def cached():
    provider = LlamaCppProvider(n_ctx=1024, n_threads=1, state_cache_mib=64)
    yield provider
    provider.close()


def test_alternating_conversations_evaluate_only_their_new_tokens_and_answer_as_without_the_cache(cached):
    with_cache = turns(cached, [chat("Alpha", 6), chat("Beta", 6)], rounds=3)
    with LlamaCppProvider(n_ctx=1024, n_threads=1, state_cache_mib=0) as plain:
        without = turns(plain, [chat("Alpha", 6), chat("Beta", 6)], rounds=3)
    assert [t[0] for t in with_cache] == [t[0] for t in without]  # temperature 0: the cache changes nothing
    assert [t[1] for t in with_cache] == [t[1] for t in without]
    # From each conversation's second turn on, everything but its new message (and the
    # reply's re-templated end) is taken back; without the cache the other
    # conversation's turn has thrown it away.
    for (_, prompt, kept, said), (_, _, plain_kept, _) in zip(with_cache[2:], without[2:]):
        assert kept == said and prompt - kept < 40
        assert plain_kept < KEEP_AT_LEAST
    stats = cached.state_cache.stats()
    assert stats["restored"] >= 4 and 0 < stats["bytes"] <= stats["limit_bytes"]


def test_one_off_work_between_two_replies_leaves_the_reply_state_and_keeps_none_of_its_own(cached):
    msgs = chat("Gamma", 5)
    cached.chat(msgs, max_tokens=4, temperature=0)
    stored = cached.state_cache.stats()["stored"]
    for part in ("first", "second"):  # two workers' sections
        cached.chat([{"role": "system", "content": "Take notes of the section."},
                     {"role": "user", "content": f"The {part} section: " + "a line of the log. " * 60}],
                    max_tokens=4, temperature=0, keep_state=False)
    assert cached.state_cache.stats()["stored"] == stored + 1  # the reply's state only
    msgs += [{"role": "assistant", "content": "Fine."}, {"role": "user", "content": "And then?"}]
    prompt = len(cached.counter.prompt_tokens(msgs))
    reply = cached.chat(msgs, max_tokens=4, temperature=0)
    assert prompt - reply.finish.cached_tokens < 20


def test_a_state_the_model_refuses_is_dropped_and_the_prompt_evaluated_whole(cached, caplog):
    msgs = chat("Delta", 5)
    reference = cached.chat(msgs, max_tokens=6, temperature=0)
    cached.chat([{"role": "user", "content": "Unrelated. " * 80}], max_tokens=2, temperature=0)
    tokens = cached.counter.prompt_tokens(msgs)
    _, entry = cached.state_cache.best(tokens)
    assert entry is not None and len(entry.tokens) >= len(tokens)
    del entry.data[len(entry.data) // 2:]  # a damaged state: llama.cpp reads past its end
    with caplog.at_level(logging.WARNING, logger="boundctx.local"):
        again = cached.chat(msgs, max_tokens=6, temperature=0)
    assert "refused a kept state" in caplog.text
    assert again.finish.cached_tokens == 0 and again.text == reference.text
    assert cached.state_cache.best(tokens)[1] is not entry


def test_a_state_larger_than_the_cache_is_not_kept():
    with LlamaCppProvider(n_ctx=1024, n_threads=1, state_cache_mib=1) as small:  # ~23 KB a token: 40 fit
        small.chat(chat("Epsilon", 8), max_tokens=2, temperature=0)
        small.chat([{"role": "user", "content": "Unrelated. " * 80}], max_tokens=2, temperature=0)
        assert len(small.state_cache) == 0 and small.state_cache.bytes == 0


def test_the_setting_reaches_the_provider_and_a_negative_size_is_refused():
    assert LlamaCppProvider(settings={"local.state_cache_mib": 3}).state_cache.limit_bytes == 3 << 20
    assert LlamaCppProvider(settings={"local.state_cache_mib": 0}).state_cache is None
    with pytest.raises(ValueError, match="state_cache_mib"):
        LlamaCppProvider(state_cache_mib=-1)
