"""LlamaServerCounter against llama-server's HTTP API: exact counts from a loopback
server backed by the real SmolLM2 tokenizer, the estimate fallback against the real
``python -m llama_cpp.server``, and clear errors when there is no server at all."""

import contextlib
import socket

import numpy as np
import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")
jinja2 = pytest.importorskip("jinja2", reason="jinja2 renders the GGUF chat template in the double")

import llama_cpp  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

from boundctx._native import tokenmap  # noqa: E402
from boundctx.errors import (  # noqa: E402
    BoundctxError,
    ConfigError,
    InexactCountWarning,
    ServerResponseError,
    ServerTimeout,
    ServerUnreachable,
)
from boundctx.tokens.estimate import ByteEstimateCounter  # noqa: E402
from boundctx.tokens.llama import default_model_path  # noqa: E402
from boundctx.tokens.server import LlamaServerCounter  # noqa: E402

from tests._support.llama_server_double import LlamaServerDouble  # noqa: E402
from tests._support.servers import free_port, llama_cpp_server, missing_server_extra  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "Be terse."},
     {"role": "user", "content": "Résumé: 中文 👩\u200d💻 and <|im_end|> typed by hand"},
     {"role": "assistant", "content": "ok"},
     {"role": "user", "content": '{"json": [1, 2, 3], "id": "a1b2c3"}\n\n\tindent'}],
]
TOOLS = [{"type": "function", "function": {"name": "grep", "description": "search files",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def reference_llm():
    """The tokenizer the counts are checked against: a separate vocab-only Llama."""
    return llama_cpp.Llama(model_path=default_model_path(), vocab_only=True, verbose=False)


@pytest.fixture(scope="module")
def reference_template(reference_llm):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(reference_llm.metadata["tokenizer.chat_template"])


@pytest.fixture(scope="module")
def double():
    server = LlamaServerDouble(n_ctx=8192, slots=2)
    server.url = server.start()
    yield server
    server.stop()


@pytest.fixture
def counter(double):
    double.requests.clear()
    with LlamaServerCounter(double.url, timeout=10) as c:
        yield c


@contextlib.contextmanager
def started_double(**options):
    server = LlamaServerDouble(**options)
    url = server.start()
    try:
        with LlamaServerCounter(url, timeout=10) as c:
            yield server, c
    finally:
        server.stop()


# -- exact counts ------------------------------------------------------------------


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_prompt_counts_equal_the_model_tokenizing_the_rendered_template(
        counter, reference_llm, reference_template, messages, add_generation_prompt):
    rendered = reference_template.render(messages=messages, add_generation_prompt=add_generation_prompt)
    # What llama-server's chat path does: add_special (BOS per metadata), parse_special.
    expected = len(reference_llm.tokenize(rendered.encode(), add_bos=True, special=True))
    assert counter.count_prompt(messages, add_generation_prompt=add_generation_prompt) == expected
    assert counter.exact is True


def test_the_prompt_is_tokenized_with_the_switches_of_the_chat_path(counter, double):
    counter.count_prompt(CONVERSATIONS[0], tools=TOOLS, add_generation_prompt=False)
    template_calls = [b for m, p, b in double.requests if p == "/apply-template"]
    assert template_calls[-1]["tools"] == TOOLS
    assert template_calls[-1]["add_generation_prompt"] is False
    prompt = double.render(CONVERSATIONS[0], add_generation_prompt=False)
    tokenize = [b for m, p, b in double.requests if p == "/tokenize" and b["content"] == prompt]
    assert tokenize and tokenize[-1]["add_special"] is True and tokenize[-1]["parse_special"] is True


def test_special_token_text_in_user_text_counts_as_text(counter, reference_llm):
    text = "a <|im_end|> b"
    as_text = len(reference_llm.tokenize(text.encode(), add_bos=False, special=False))
    as_special = len(reference_llm.tokenize(text.encode(), add_bos=False, special=True))
    assert as_special < as_text
    assert counter.count_text(text) == as_text
    assert counter.count_text("") == 0


def test_piece_bytes_tile_multibyte_text_even_from_byte_list_pieces(counter, double, reference_llm):
    text = "Ünïcödé 中文字符 👩\u200d💻🎉 é\u0301 — ok"
    before = double.byte_list_pieces
    pieces = counter.piece_bytes(text)
    assert double.byte_list_pieces > before  # the server sent some pieces as byte lists
    assert pieces.dtype == np.int64
    assert int(pieces.sum()) == len(text.encode())
    assert len(pieces) == counter.count_text(text)
    assert len(pieces) == len(reference_llm.tokenize(text.encode(), add_bos=False, special=False))
    s, e = np.empty(len(pieces), np.int64), np.empty(len(pieces), np.int64)
    tokenmap.token_spans(text, pieces, s, e)
    assert s[0] == 0 and e[-1] == len(text)
    assert len(counter.piece_bytes("")) == 0


@pytest.mark.parametrize("text", ["log\x1dline", "ab\U00040000c"])
def test_pieces_of_text_llama_cpp_changes_are_aligned_with_the_text(counter, text):
    pieces = counter.piece_bytes(text)
    assert int(pieces.sum()) == len(text.encode()) and len(pieces) == counter.count_text(text)


def test_props_give_the_per_slot_window_slots_and_template(counter, double):
    assert counter.context_window == 8192 // 2
    assert counter.total_slots == 2
    assert counter.chat_template == double.vocab.metadata["tokenizer.chat_template"]
    assert counter.props.eos_token == double.eos_token
    gets = [p for m, p, b in double.requests if m == "GET"]
    assert counter.context_window == 4096 and gets == ["/props"]  # cached: asked once
    counter.refresh()
    assert counter.context_window == 4096
    assert [p for m, p, b in double.requests if m == "GET"] == ["/props", "/props"]


def test_the_openai_base_url_of_the_server_is_accepted(double):
    with LlamaServerCounter(double.url + "/v1/", timeout=10) as c:
        assert c.url == double.url and c.count_text("hello world") == 2


def test_an_api_key_is_sent_as_a_bearer_token_with_every_request(double):
    double.authorizations.clear()
    with LlamaServerCounter(double.url, timeout=10, api_key="k-1") as c:
        assert c.count_text("hello world") == 2
    assert double.authorizations and set(double.authorizations) == {"Bearer k-1"}
    double.authorizations.clear()
    with LlamaServerCounter(double.url, timeout=10) as c:
        c.count_text("hello world")
    assert double.authorizations and set(double.authorizations) == {None}


def test_pieces_that_cannot_match_the_text_are_an_error_not_a_guess():
    with started_double(corrupt_pieces=True) as (_, c):
        with pytest.raises(ServerResponseError, match="do not match the text"):
            # Longer than the alignment's resynchronisation window (32 bytes, 8 tokens).
            c.piece_bytes("hello world, how are you today? " * 4)


def test_a_build_that_ignores_parse_special_is_reported(reference_llm):
    with started_double(ignore_parse_special=True) as (_, c):
        with pytest.warns(InexactCountWarning, match="ignores parse_special"):
            assert c.exact is True  # prompts are still counted exactly
        assert c.text_counts_exact is False


def test_server_errors_carry_the_servers_own_message(counter):
    with pytest.raises(ServerResponseError, match=r"POST http://[\d.:]+/apply-template failed with "
                                                  r"HTTP 500: .*has no attribute 'role'") as info:
        counter.count_prompt([{"content": "a message without a role"}])
    assert isinstance(info.value, BoundctxError)
    assert counter.exact is True  # an error about the request is not a missing endpoint


# -- fallback ----------------------------------------------------------------------


def test_an_older_build_without_apply_template_falls_back_to_the_estimate_and_says_so(reference_llm):
    with started_double(missing={"/apply-template"}) as (server, c):
        with pytest.warns(InexactCountWarning, match=r"/apply-template answered 404"):
            assert c.exact is False
        assert "404" in c.fallback_reason
        messages = CONVERSATIONS[1]
        estimate = c.count_prompt(messages)
        exact = len(reference_llm.tokenize(
            server.render(messages).encode(), add_bos=True, special=True))
        assert estimate >= exact  # conservative
        assert estimate == ByteEstimateCounter().count_prompt(messages)
        assert c.count_text("héllo") == 6 and list(c.piece_bytes("hé")) == [1, 1, 1]
        assert c.context_window == 4096  # /props answered before the probe failed


def test_an_endpoint_vanishing_later_switches_to_the_estimate_once():
    with started_double() as (server, c):
        assert c.exact is True
        server.missing.add("/tokenize")
        with pytest.warns(InexactCountWarning, match="/tokenize answered 404") as record:
            assert c.count_text("héllo") == 6
            assert c.count_text("héllo") == 6
        assert len(record) == 1 and c.exact is False


def test_llama_cpp_python_server_has_no_tokenizer_endpoints_so_the_estimate_is_used(
        tmp_path, reference_llm, reference_template):
    missing = missing_server_extra()
    if missing:
        pytest.skip(f"llama-cpp-python's server extra is not installed (missing {', '.join(missing)}): "
                    "pip install 'llama-cpp-python[server]'")
    with llama_cpp_server(tmp_path / "server.log") as url, LlamaServerCounter(url, timeout=10) as c:
        with pytest.warns(InexactCountWarning, match=r"GET /props answered 404") as record:
            assert c.exact is False
        assert "estimate" in str(record[0].message)
        assert c.context_window is None and c.props is None
        messages = CONVERSATIONS[1]
        rendered = reference_template.render(messages=messages, add_generation_prompt=True)
        exact = len(reference_llm.tokenize(rendered.encode(), add_bos=True, special=True))
        assert c.count_prompt(messages) >= exact
        text = messages[1]["content"]
        assert c.count_text(text) >= len(reference_llm.tokenize(text.encode(), add_bos=False, special=False))


# -- no server -----------------------------------------------------------------------


def test_connection_refused_names_the_url_and_what_to_do():
    url = f"http://127.0.0.1:{free_port()}"
    with LlamaServerCounter(url, timeout=5) as c:
        with pytest.raises(ServerUnreachable, match="cannot reach the llama-server at " + url) as info:
            c.count_text("hello")
        assert "start it (llama-server -m" in str(info.value)
        assert isinstance(info.value, ConnectionError) and isinstance(info.value, BoundctxError)
        assert c._mode is None  # nothing decided: the next call probes again


def test_a_server_that_never_answers_times_out_clearly():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)  # connections complete in the backlog; nobody ever answers
        url = "http://127.0.0.1:%d" % listener.getsockname()[1]
        with LlamaServerCounter(url, timeout=0.3) as c:
            with pytest.raises(ServerTimeout, match=r"did not answer GET /props within 0\.3 s") as info:
                c.context_window
            assert isinstance(info.value, TimeoutError) and isinstance(info.value, ServerUnreachable)


@pytest.mark.parametrize("url", ["ftp://host", "localhost:8080", "http://"])
def test_a_url_that_is_not_http_is_a_config_error(url):
    with pytest.raises(ConfigError):
        LlamaServerCounter(url)


def test_a_timeout_that_is_not_positive_is_a_config_error():
    with pytest.raises(ConfigError):
        LlamaServerCounter("http://127.0.0.1:8080", timeout=0)
