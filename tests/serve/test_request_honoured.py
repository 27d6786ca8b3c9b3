"""Request fields that change the answer are honoured or refused, never dropped (issue
26): sampling (``seed``, ``top_p``, penalties, llama.cpp's ``top_k``/``min_p``),
``tool_choice`` and ``parallel_tool_calls``, ``response_format``; fields boundctx cannot
honour (``logprobs``, ``logit_bias``, audio) are a 400 naming them at any value but the
neutral one; a tool call in history whose arguments are not a JSON object is a 400. Each
is checked on what reaches the model (the scripted provider's requests, or a remote
server's request body) and on the wire."""

import json

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the serve tests drive the server with the official openai client")

from boundctx.providers import ScriptedProvider, ToolCallChunk  # noqa: E402
from boundctx.providers.base import Sampling  # noqa: E402
from boundctx.providers.remote import OpenAICompatibleProvider  # noqa: E402

from tests._support.scripted import ASK, MODEL, WITH_LOG, answer, client, settings  # noqa: E402
from tests._support.servers import delta  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "read_log", "description": "read the build log",
                                           "parameters": {"type": "object", "properties": {}}}},
         {"type": "function", "function": {"name": "grep", "parameters": {
             "type": "object", "properties": {"q": {"type": "string"}}}}}]


def post(server, **body):
    return httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": ASK, **body})


def refused(server, param, **body):
    r = post(server, **body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    return error


# -- sampling --------------------------------------------------------------------------


def test_sampling_fields_reach_the_model_and_only_those_given(serve):
    provider = ScriptedProvider(lambda r: "ok")
    server = serve(provider, settings=settings(), model_id=MODEL)
    c = client(server)
    c.chat.completions.create(model=MODEL, messages=ASK, seed=7, top_p=0.5, presence_penalty=0.25,
                              frequency_penalty=-0.5, extra_body={"top_k": 20, "min_p": 0.1})
    c.chat.completions.create(model=MODEL, messages=ASK, seed=8, stream=True).close()
    c.chat.completions.create(model=MODEL, messages=ASK)
    assert [r.sampling for r in provider.requests] == [
        Sampling(seed=7, top_p=0.5, top_k=20, min_p=0.1, presence_penalty=0.25, frequency_penalty=-0.5),
        Sampling(seed=8), None]


def test_the_workers_keep_their_own_sampling_and_the_answer_takes_the_callers(serve):
    provider = ScriptedProvider(answer)
    server = serve(provider, settings=settings(**{"chat.n_ctx": 2048}), model_id=MODEL)
    r = post(server, messages=WITH_LOG, seed=11)
    assert r.status_code == 200, r.text
    workers = [q for q in provider.requests if q.sampling is None]
    answers = [q for q in provider.requests if q.sampling is not None]
    assert workers and answers and all(q.sampling == Sampling(seed=11) for q in answers)
    assert all(not q.keep_state for q in workers)  # the note-taking calls, not the answer


@pytest.mark.parametrize("field, value", [("top_p", 1.5), ("top_p", -0.1), ("min_p", 2), ("top_k", -1),
                                          ("presence_penalty", 2.5), ("frequency_penalty", -3), ("seed", 2**64)])
def test_a_sampling_value_out_of_range_is_a_400_naming_it(serve, field, value):
    provider = ScriptedProvider(lambda r: "ok")
    server = serve(provider, settings=settings(), model_id=MODEL)
    if field == "seed":  # past 64 bits: the decoder refuses it, naming the field
        assert refused(server, field, **{field: value})
    else:
        assert field in refused(server, field, **{field: value})["message"]
    assert provider.requests == []


# -- tool_choice and parallel_tool_calls -----------------------------------------------


def test_a_named_tool_choice_and_parallel_tool_calls_reach_the_model(serve):
    provider = ScriptedProvider(lambda r: [ToolCallChunk("call_1", "grep", '{"q": "FAILED"}')])
    server = serve(provider, settings=settings(), model_id=MODEL)
    named = {"type": "function", "function": {"name": "grep"}}
    done = client(server).chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=named,
                                                  parallel_tool_calls=False)
    assert done.choices[0].finish_reason == "tool_calls"
    assert done.choices[0].message.tool_calls[0].function.name == "grep"
    request = provider.requests[-1]
    assert request.tool_choice == named and request.parallel_tool_calls is False
    for choice in ("required", "none", "auto"):
        post(server, tools=TOOLS, tool_choice=choice)
        assert provider.requests[-1].tool_choice == choice and provider.requests[-1].tools


@pytest.mark.parametrize("body, said", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "rm"}}}, "'rm', which is not among"),
    ({"tool_choice": "required"}, "no tools are offered"),
    ({"tool_choice": {"type": "function", "function": {"name": "grep"}}}, "no tools are offered"),
    ({"tools": TOOLS, "tool_choice": "always"}, "is none of"),
    ({"tools": TOOLS, "tool_choice": {"function": {"name": "grep"}}}, "is none of"),
])
def test_a_tool_choice_that_cannot_be_honoured_is_a_400_naming_it(serve, body, said):
    provider = ScriptedProvider(lambda r: "ok")
    server = serve(provider, settings=settings(), model_id=MODEL)
    error = refused(server, "tool_choice", **body)
    assert said in error["message"] and error["code"] == "invalid_tool_choice"
    assert provider.requests == []


def test_a_model_that_cannot_be_held_to_a_call_refuses_required_and_is_not_shown_tools_under_none(serve):
    provider = ScriptedProvider(lambda r: "in words")
    provider.supports_tool_choice = False  # as a local model: its chat template decides
    server = serve(provider, settings=settings(), model_id=MODEL)
    assert "cannot be held to calling a tool" in refused(server, "tool_choice", tools=TOOLS,
                                                         tool_choice="required")["message"]
    r = post(server, tools=TOOLS, tool_choice="none")
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "in words"
    assert provider.requests[-1].tools is None and provider.requests[-1].tool_choice is None
    provider.supports_tools = False  # a model that cannot call tools at all may still be told not to
    assert post(server, tools=TOOLS, tool_choice="none").status_code == 200
    assert post(server, tools=TOOLS).status_code == 400


# -- response_format -------------------------------------------------------------------


def test_response_format_holds_the_answer_to_a_schema(serve):
    provider = ScriptedProvider(lambda r: '{"step": 377}')
    server = serve(provider, settings=settings(), model_id=MODEL)
    schema = {"type": "object", "properties": {"step": {"type": "integer"}}, "required": ["step"]}
    c = client(server)
    done = c.chat.completions.create(model=MODEL, messages=ASK, response_format={
        "type": "json_schema", "json_schema": {"name": "step", "schema": schema, "strict": True}})
    assert json.loads(done.choices[0].message.content) == {"step": 377}
    c.chat.completions.create(model=MODEL, messages=ASK, response_format={"type": "json_object"})
    c.chat.completions.create(model=MODEL, messages=ASK, response_format={"type": "text"})
    assert [r.schema for r in provider.requests] == [schema, {"type": "object"}, None]


def test_the_sdk_parse_helper_reads_a_schema_held_answer(serve):
    pydantic = pytest.importorskip("pydantic", reason="the SDK's parse() needs pydantic")

    class Step(pydantic.BaseModel):
        step: int
        job: str

    provider = ScriptedProvider(lambda r: '{"step": 377, "job": "7f3a9c11"}')
    server = serve(provider, settings=settings(), model_id=MODEL)
    parsed = client(server).chat.completions.parse(model=MODEL, messages=ASK, response_format=Step)
    assert parsed.choices[0].message.parsed == Step(step=377, job="7f3a9c11")
    assert provider.requests[-1].schema["properties"].keys() == {"step", "job"}


def test_with_analysis_only_the_answer_is_held_to_the_schema(serve):
    provider = ScriptedProvider(answer)
    server = serve(provider, settings=settings(**{"chat.n_ctx": 2048}), model_id=MODEL)
    r = post(server, messages=WITH_LOG, response_format={"type": "json_object"})
    assert r.status_code == 200, r.text
    schemas = [q.schema for q in provider.requests]
    assert schemas[-1] == {"type": "object"} and None in schemas[:-1]  # the workers' notes stay free text


@pytest.mark.parametrize("response_format, param", [
    ({"type": "xml"}, "response_format.type"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": "object"}}, "response_format.json_schema"),
    ("json", "response_format.type"),
])
def test_an_unsupported_response_format_is_a_400_naming_the_field(serve, response_format, param):
    provider = ScriptedProvider(lambda r: "ok")
    server = serve(provider, settings=settings(), model_id=MODEL)
    refused(server, param, response_format=response_format)
    assert provider.requests == []


# -- what is forwarded to a remote model ------------------------------------------------


def test_a_remote_model_is_sent_what_the_caller_asked_and_nothing_it_did_not(serve, scripted_server):
    upstream = scripted_server(*[(200, [delta("ok"), delta(finish="stop")])] * 2)
    remote = OpenAICompatibleProvider(upstream.url, model="up", context_window=8192)
    server = serve(remote, settings=settings(**{"chat.analysis_workers": 0}), model_id=MODEL)
    try:
        schema = {"type": "object", "properties": {"a": {"type": "string"}}}
        assert post(server, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "read_log"}},
                    parallel_tool_calls=False, seed=3, top_p=0.9, top_k=5,
                    response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
                    ).status_code == 200
        assert post(server).status_code == 200
    finally:
        remote.close()
    asked, plain = upstream.requests
    assert asked["tool_choice"] == {"type": "function", "function": {"name": "read_log"}}
    assert asked["parallel_tool_calls"] is False
    assert (asked["seed"], asked["top_p"], asked["top_k"]) == (3, 0.9, 5)
    assert asked["response_format"]["json_schema"]["schema"] == schema
    for field in ("tool_choice", "parallel_tool_calls", "seed", "top_p", "top_k", "min_p", "presence_penalty",
                  "frequency_penalty", "response_format"):
        assert field not in plain, field  # the server's own defaults stand


# -- refused unless neutral -------------------------------------------------------------


@pytest.mark.parametrize("field, neutral, asked", [
    ("logprobs", False, True), ("top_logprobs", 0, 5), ("logit_bias", {}, {"50256": -100}),
    ("modalities", ["text"], ["text", "audio"]), ("audio", None, {"voice": "alloy", "format": "wav"}),
    ("prediction", None, {"type": "content", "content": "x"}),
])
def test_a_field_boundctx_cannot_honour_is_accepted_neutral_and_refused_otherwise(serve, field, neutral, asked):
    provider = ScriptedProvider(lambda r: "ok")
    server = serve(provider, settings=settings(), model_id=MODEL)
    assert post(server, **{field: neutral}).status_code == 200
    error = refused(server, field, **{field: asked})
    assert error["code"] == "unsupported_parameter" and field in error["message"]
    assert len(provider.requests) == 1


@pytest.mark.parametrize("field, neutral, asked", [
    ("functions", [], [{"name": "read_log", "parameters": {"type": "object"}}]),
    ("function_call", None, {"name": "read_log"}), ("grammar", None, 'root ::= "yes"'),
    ("json_schema", None, {"type": "object"}), ("guided_json", None, {"type": "object"}),
    ("guided_choice", None, ["yes", "no"]), ("repeat_penalty", 1.0, 1.3), ("repetition_penalty", 1, 1.2),
    ("typical_p", 1.0, 0.5), ("mirostat", 0, 2), ("min_tokens", 0, 10), ("ignore_eos", False, True),
    ("best_of", 1, 3), ("n_predict", None, 16),
])
def test_legacy_and_other_servers_fields_that_change_an_answer_are_refused_unless_neutral(serve, field, neutral,
                                                                                          asked):
    # What a client sends to llama.cpp's or vLLM's server, or OpenAI's legacy function
    # API: it expects the effect, so it is told, never answered as if it had one.
    provider = ScriptedProvider(lambda r: "ok")
    server = serve(provider, settings=settings(), model_id=MODEL)
    assert post(server, **{field: neutral}).status_code == 200
    error = refused(server, field, **{field: asked})
    assert error["code"] == "unsupported_parameter" and error["message"].startswith(f"{field}: ")
    assert len(provider.requests) == 1


class _Grammarless(ScriptedProvider):
    """A provider whose decoder cannot hold ``minimum`` (as the local model's grammar)."""

    def check_schema(self, schema):
        from boundctx.errors import ResponseSchemaError
        if "minimum" in json.dumps(schema):
            raise ResponseSchemaError("the grammar cannot hold properties.n.minimum", at="properties.n.minimum")


def test_a_schema_keyword_the_model_cannot_be_held_to_is_a_400_naming_where_before_any_call(serve):
    provider = _Grammarless(lambda r: '{"n": 4}')
    server = serve(provider, settings=settings(), model_id=MODEL)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}
    for stream in (False, True):
        r = post(server, stream=stream, response_format={"type": "json_schema",
                                                         "json_schema": {"name": "n", "schema": schema}})
        assert r.status_code == 400, r.text  # before the first byte, streamed or not
        error = r.json()["error"]
        assert error["param"] == "response_format.json_schema.schema.properties.n.minimum", error
        assert error["code"] == "invalid_response_format"
    assert provider.requests == []
    del schema["properties"]["n"]["minimum"]
    assert post(server, response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
                ).status_code == 200


def test_the_official_client_sees_logprobs_refused_not_answered_with_none(serve):
    server = serve(ScriptedProvider(lambda r: "ok"), settings=settings(), model_id=MODEL)
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).chat.completions.create(model=MODEL, messages=ASK, logprobs=True, top_logprobs=2)
    assert caught.value.body["param"] == "logprobs"


# -- history ---------------------------------------------------------------------------


@pytest.mark.parametrize("arguments, said", [
    ("{not json", "is not valid JSON"), ('["a"]', "must be a JSON object"), ({"q": 1}, "must be a string of JSON"),
])
def test_a_tool_call_in_history_whose_arguments_are_not_a_json_object_is_a_400(serve, arguments, said):
    provider = ScriptedProvider(lambda r: "ok")
    server = serve(provider, settings=settings(), model_id=MODEL)
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "nothing"}]
    error = refused(server, "messages[1].tool_calls[0].function.arguments", messages=history)
    assert said in error["message"]
    assert provider.requests == []


def test_text_completions_are_a_404_in_the_api_shape_that_says_where_to_go(serve):
    server = serve(ScriptedProvider(lambda r: "ok"), settings=settings(), model_id=MODEL)
    for path in ("/v1/completions", "/completions"):
        r = httpx.post(server.url + path, json={"model": MODEL, "prompt": "Say hi"})
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/json")
        assert "POST /v1/chat/completions" in r.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError) as caught:
        client(server).completions.create(model=MODEL, prompt="Say hi")
    assert "chat completions only" in str(caught.value)
