"""``boundctx serve`` as a user starts it, on the embedded model (slow): the official
client streams an answer about a build log with progress chunks before the answer, the
count route is the model's own tokenizer, a session reply appends only a complete
answer, boundctx's own remote provider reads the server, two conversations taking
turns each evaluate only their new tokens, the model stops at a stop string, and a
conversation of only a system message is answered."""

import json
import os
import pathlib
import subprocess
import sys

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the serve tests drive the server with the official openai client")
pytest.importorskip("llama_cpp", reason="the embedded model needs the local extra (pip install 'boundctx[local]')")

from tests._support.servers import free_port, running_process  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from boundctx.tokens.llama import default_model_path

    try:
        default_model_path()
    except Exception as exc:
        pytest.skip(f"the embedded model is not installed: {exc}")
    folder = tmp_path_factory.mktemp("sessions")
    log = tmp_path_factory.mktemp("log") / "serve.log"
    port = free_port()
    argv = [sys.executable, "-m", "boundctx", "serve", "--n-ctx", "2048", "--port", str(port),
            "--sessions-dir", str(folder)]
    url = f"http://127.0.0.1:{port}"
    with running_process(argv, url + "/health", what="boundctx serve", log_path=log):
        yield url, folder


def test_the_official_client_streams_progress_before_an_answer_about_a_build_log(served):
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    log = (ROOT / "examples" / "build.log").read_text()
    chunks = list(client.chat.completions.create(model=model, stream=True, max_tokens=128, messages=[
        {"role": "user", "content": "Which step failed, and what is its job id?\n\n" + log}]))
    kinds = [(c.model_extra or {}).get("boundctx", {}).get("type") for c in chunks]
    first_text = next(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content)
    assert "analysis_progress" in kinds[:first_text]  # the log was read in sections, first
    for c in chunks:  # progress never carries text, text never carries progress
        if (c.model_extra or {}).get("boundctx", {}).get("type") in ("analysis_progress", "fitted", "stage"):
            assert not c.choices[0].delta.content
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() and chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_count_is_the_embedded_models_exact_count(served):
    from boundctx.tokens.llama import LlamaCounter, default_model_path

    url, _ = served
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How many tokens is this?"}]
    got = httpx.post(url + "/boundctx/v1/count", json={"messages": messages}, timeout=30).json()
    assert got["exact"] is True and got["context_window"] == 2048
    assert got["prompt_tokens"] == LlamaCounter(default_model_path()).count_prompt(messages)


def test_a_session_reply_on_the_model_is_saved_only_when_complete(served):
    url, folder = served
    assert httpx.post(url + "/boundctx/v1/sessions", json={"id": "real"}).status_code == 201
    with httpx.stream("POST", url + "/boundctx/v1/sessions/real/replies", json={"content": "Say hi", "max_tokens": 24},
                      timeout=300) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[0]["type"] == "reply" and events[-1]["type"] == "done"
    done = events[-1]
    text = "".join(e["text"] for e in events if e["type"] == "reply_delta")
    lines = (folder / "real.jsonl").read_text().splitlines()
    if done["finish_reason"] == "stop":
        assert done["saved"] is True and [json.loads(x)["message"]["content"] for x in lines] == ["Say hi", text]
    else:  # cut at its budget: shown, not kept
        assert done["saved"] is False and lines == []


def test_boundctx_remote_provider_reads_boundctx_serve(served):
    url, _ = served
    done = subprocess.run([sys.executable, "-m", "boundctx", "ask", "--provider", "remote", "--base-url", url,
                           "--max-tokens", "24", "Say hi"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BOUNDCTX_API_KEY": "none"})
    # 0: a complete answer; 3: one cut at its 24 tokens (README, "Exit codes"), which the
    # small model may well need: either way the text came through the server.
    assert done.returncode in (0, 3), done.stderr
    assert done.stdout.strip() and ("cut at its 24-token budget" in done.stderr) == (done.returncode == 3)


def test_two_conversations_taking_turns_each_evaluate_only_their_new_messages(served):
    # The server's local model keeps each conversation's evaluated prefix in its state
    # cache: the usage of a conversation's next turn says the prefix was kept, although
    # the other conversation was evaluated in between.
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    chats = {name: [{"role": "system", "content": f"You answer questions about the {name} project briefly."},
                    *[m for i in range(6) for m in (
                        {"role": "user", "content": f"What did release {i} of {name} change? Keep it short."},
                        {"role": "assistant", "content": f"Release {i} of {name} fixed the parser and the build."})]]
             for name in ("Alpha", "Beta")}
    kept = {}
    for turn in range(2):
        for name, messages in chats.items():
            messages.append({"role": "user", "content": f"And after that, in turn {turn}?"})
            out = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
            kept[name, turn] = (out.usage.prompt_tokens, out.usage.prompt_tokens_details.cached_tokens)
            messages.append({"role": "assistant", "content": out.choices[0].message.content or "Nothing."})
    for name in chats:
        prompt, cached = kept[name, 1]
        assert prompt - cached < 40, (name, kept)  # the other conversation ran in between
    cache = httpx.get(url + "/v1/models").json()["data"][0]["meta"]["state_cache"]
    assert cache["restored"] >= 2 and 0 < cache["bytes"] <= cache["limit_bytes"] == 512 << 20


def test_the_model_stops_at_a_stop_string_it_writes_and_none_of_it_is_shown(served):
    # The stop string is taken from the model's own answer at temperature 0, so the
    # model reaches it; the model stops there itself (its usage counts the tokens it made,
    # where the engine's own cut would report none), streamed or whole.
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    ask = [{"role": "user", "content": "Name the days of the week, one per line."}]
    free = client.chat.completions.create(model=model, messages=ask, max_tokens=32, temperature=0)
    text = free.choices[0].message.content
    at = next(p for p in range(4, len(text) - 3) if text.find(text[p:p + 3]) == p and text[p:p + 3].strip())
    stop = text[at:at + 3]
    whole = client.chat.completions.create(model=model, messages=ask, max_tokens=32, temperature=0, stop=[stop])
    assert whole.choices[0].message.content == text[:at] and whole.choices[0].finish_reason == "stop"
    assert 0 < whole.usage.completion_tokens < free.usage.completion_tokens
    chunks = list(client.chat.completions.create(model=model, messages=ask, max_tokens=32, temperature=0,
                                                 stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].finish_reason is None) \
        == text[:at]


def test_a_conversation_of_only_a_system_message_is_answered(served):
    # LibreChat's title request: the instruction and the conversation in one system message.
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    out = client.chat.completions.create(model=model, max_tokens=16, temperature=0, messages=[
        {"role": "system", "content": "Write a five-word title for this conversation.\n\nUser: Why did the build "
                                      "fail?\nAssistant: Step 377 failed with id 7f3a9c11."}])
    assert out.choices[0].message.content.strip() and out.choices[0].finish_reason in ("stop", "length")
    assert out.usage.completion_tokens > 0


def test_a_seed_makes_a_sampled_reply_repeatable_on_the_local_model(served):
    # At temperature 1 the same seed gives the same text, whatever ran in between (the
    # seed is set per call, not once per process).
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    ask = [{"role": "user", "content": "Write one sentence about rivers."}]

    def sampled(seed):
        return client.chat.completions.create(model=model, messages=ask, max_tokens=24, temperature=1,
                                              seed=seed).choices[0].message.content

    first = sampled(41)
    others = {sampled(seed) for seed in (1, 2, 3)}
    assert sampled(41) == first
    assert len(others | {first}) > 1  # at temperature 1 the seed is what decides: four seeds, not one text


def test_a_json_response_format_holds_the_local_model_to_json(served):
    url, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    out = client.chat.completions.create(model=model, max_tokens=48, temperature=0, messages=[
        {"role": "user", "content": "Which city is the capital of France? Answer in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
    assert out.choices[0].finish_reason == "stop", out.choices[0].message.content
    assert set(json.loads(out.choices[0].message.content)) == {"city"}
