"""The HTTP edge (boundctx._http): real failures on loopback become boundctx's errors
with words for what was under way, error bodies are read one way, and only what cannot
have started any work is tried again."""

import contextlib
import socket
import threading

import httpx
import pytest

from boundctx._http import bearer, error_detail, map_httpx_exceptions, retry_delay, server_root
from boundctx.errors import ConfigError, ServerTimeout, ServerUnreachable

from tests._support.servers import free_port


@contextlib.contextmanager
def raw_server(answer: bytes | None, *, hold: bool = False):
    """A loopback server that reads one request and writes ``answer`` as raw bytes, then
    closes the connection (or, with ``hold``, keeps it open and silent until the block
    ends). None: connections are accepted by the kernel and never answered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    done = threading.Event()

    def serve():
        conn, _ = listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            conn.sendall(answer)
            if hold:
                done.wait(10)

    thread = threading.Thread(target=serve, daemon=True) if answer is not None else None
    if thread is not None:
        thread.start()
    try:
        yield "http://127.0.0.1:%d" % listener.getsockname()[1]
    finally:
        done.set()
        if thread is not None:
            thread.join(10)
        listener.close()


def failure(url, *, during, timeout=0.3, stream=False, **words):
    """The error the mapper raises for what happens on GET ``url``."""
    with pytest.raises(ServerUnreachable) as info, httpx.Client(timeout=timeout) as client:
        if stream:
            with client.stream("GET", url) as response, map_httpx_exceptions(url, timeout, during=during, **words):
                response.read()
        else:
            with map_httpx_exceptions(url, timeout, during=during, **words):
                client.get(url)
    assert isinstance(info.value.__cause__, httpx.TransportError)
    return info.value


# -- the server's address ------------------------------------------------------------------


@pytest.mark.parametrize("given, root", [("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
                                         ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080"),
                                         (" https://host//\n", "https://host"),
                                         ("https://host/proxy/v1", "https://host/proxy")])
def test_the_root_drops_trailing_slashes_and_the_openai_v1(given, root):
    assert server_root(given) == root


@pytest.mark.parametrize("url", ["ftp://host", "localhost:8080", "http://", "", "http://[::1"])
def test_a_root_that_is_not_http_is_a_config_error_naming_what_was_given(url):
    with pytest.raises(ConfigError, match="the llama-server URL must be http|not a server URL"):
        server_root(url, what="the llama-server URL")


def test_an_api_key_goes_as_a_bearer_token_and_none_sends_no_header():
    assert bearer("k-1") == {"Authorization": "Bearer k-1"}
    assert bearer(None) == {} and bearer("") == {}


# -- failures, as boundctx's errors ------------------------------------------------------


def test_a_refused_connection_is_unreachable_and_safe_to_try_again():
    url = f"http://127.0.0.1:{free_port()}/v1/chat/completions"
    error = failure(url, during="connect")
    assert not isinstance(error, ServerTimeout)
    assert str(error).startswith(f"cannot connect to {url} (") and "pass the right base_url" in str(error)
    assert [retry_delay(error, attempt, 2) for attempt in range(3)] == [0.2, 0.4, None]


def test_a_server_that_never_answers_is_a_timeout_and_never_tried_again():
    with raw_server(None) as url:
        error = failure(url, during="connect", timeout=0.2)
    assert isinstance(error, ServerTimeout) and isinstance(error, TimeoutError)
    assert str(error) == f"{url} did not answer within 0.2 s"
    assert retry_delay(error, 0, 2) is None  # the server may be working on it


def test_a_reply_cut_short_says_it_was_not_resent():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ndata: partial"
    with raw_server(answer) as url:
        error = failure(url, during="stream", stream=True)
    assert not isinstance(error, ServerTimeout)
    assert str(error).startswith(f"the connection to {url} broke in the middle of a reply (")
    assert str(error).endswith("the reply was not resent")


def test_a_reply_that_stalls_is_a_timeout_in_the_middle_of_a_reply():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ndata: partial"
    with raw_server(answer, hold=True) as url:
        error = failure(url, during="stream", stream=True, timeout=0.2)
    assert isinstance(error, ServerTimeout)
    assert str(error) == f"{url} sent nothing for 0.2 s in the middle of a reply"


def test_an_error_answer_cut_before_its_body_says_which_status_it_was():
    answer = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 80\r\n\r\n{\"error\""
    with raw_server(answer) as url:
        error = failure(url, during="error_body", stream=True, status=500)
    assert str(error).startswith(f"{url} answered 500 and dropped the connection before saying why (")


def test_a_llama_server_request_names_the_server_the_request_and_what_to_do():
    url = f"http://127.0.0.1:{free_port()}"
    refused = failure(url, during="request", request="POST /tokenize")
    assert str(refused).startswith(f"cannot reach the llama-server at {url} (")
    assert "start it (llama-server -m MODEL.gguf --port PORT)" in str(refused)
    with raw_server(None) as url:
        silent = failure(url, during="request", request="GET /props", timeout=0.2)
    assert isinstance(silent, ServerTimeout)
    assert str(silent).startswith(f"the llama-server at {url} did not answer GET /props within 0.2 s (ReadTimeout)")


def test_other_exceptions_and_clean_blocks_pass_through_untouched():
    with pytest.raises(KeyError):
        with map_httpx_exceptions("http://127.0.0.1:9", 1.0, during="connect"):
            raise KeyError("mine")
    with map_httpx_exceptions("http://127.0.0.1:9", 1.0, during="connect"):
        pass


# -- error answers -----------------------------------------------------------------------


@pytest.mark.parametrize("status, body, said, error", [
    (400, b'{"error": {"message": "too long", "type": "exceed_context_size_error", "n_ctx": 512}}',
     "too long", {"message": "too long", "type": "exceed_context_size_error", "n_ctx": 512}),
    (500, b'{"error": "boom"}', "boom", None),
    (404, b'{"detail": "Not Found"}', "Not Found", None),  # FastAPI (llama_cpp.server)
    (422, b'{"detail": [{"loc": ["body"], "msg": "field required"}]}',
     '[{"loc":["body"],"msg":"field required"}]', None),
    (500, b'{"error": {"code": 500}}', '{"error": {"code": 500}}', {"code": 500}),
    (502, b"<html>bad gateway</html>", "<html>bad gateway</html>", None),
    (503, b"", "Service Unavailable", None),
])
def test_an_error_body_is_read_one_way_whatever_the_server(status, body, said, error):
    assert error_detail(httpx.Response(status, content=body)) == (said, error)


def test_an_error_body_without_a_message_is_quoted_at_most_500_characters():
    said, _ = error_detail(httpx.Response(500, content=b"x" * 2000))
    assert said == "x" * 500


# -- what is tried again -----------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_answer_waits_its_retry_after_or_a_doubling_backoff_up_to_10_s(status):
    busy = httpx.Response(status)
    assert [retry_delay(busy, attempt, 3) for attempt in range(4)] == [0.5, 1.0, 2.0, None]
    assert retry_delay(httpx.Response(status, headers={"retry-after": "3"}), 0, 3) == 3.0
    assert retry_delay(httpx.Response(status, headers={"retry-after": "120"}), 0, 3) == 10.0


@pytest.mark.parametrize("header", ["0", "-5", "nan", "inf", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_a_retry_after_that_is_no_positive_number_of_seconds_falls_back_on_the_backoff(header):
    assert retry_delay(httpx.Response(503, headers={"retry-after": header}), 1, 3) == 1.0


@pytest.mark.parametrize("status", [200, 400, 401, 500, 502])
def test_other_answers_are_never_tried_again(status):
    assert retry_delay(httpx.Response(status), 0, 3) is None
