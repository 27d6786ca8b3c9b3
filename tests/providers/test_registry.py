"""The provider registry (decision 0035): ``chat.provider`` chooses, the provider's own
settings group builds it, and the command line, the server and the API go one way."""

from __future__ import annotations

import pytest

from boundctx import config
from boundctx.errors import ConfigError
from boundctx.providers import PROVIDERS, from_settings
from boundctx.providers.remote import OpenAICompatibleProvider, api_key_of

from tests._support.servers import delta


def test_the_setting_offers_exactly_the_registered_providers_and_each_owns_a_settings_group():
    assert config.KEYS["chat.provider"].choices == tuple(PROVIDERS)
    groups = [kind.group for kind in PROVIDERS.values()]
    assert len(set(groups)) == len(groups)
    assert set(groups) <= {view.group for view in config.VIEWS}
    assert all(name == kind.name for name, kind in PROVIDERS.items())


def _remote(url: str, **values) -> OpenAICompatibleProvider:
    provider = from_settings({"chat.provider": "remote", "remote.base_url": url, **values})
    assert isinstance(provider, OpenAICompatibleProvider)
    return provider


def test_the_remote_provider_is_built_from_the_remote_group_and_sends_what_it_says(scripted_server):
    server = scripted_server((200, [delta("hi"), delta(finish="stop")]))
    provider = _remote(server.url + "/v1", **{"remote.model": "m-7", "remote.timeout_s": 7.5,
                                              "remote.max_retries": 0, "chat.n_ctx": 4096})
    try:
        assert (provider.model, provider.timeout, provider.max_retries, provider.context_window) == \
            ("m-7", 7.5, 0, 4096)
        assert provider.chat([{"role": "user", "content": "q"}], max_tokens=4).text == "hi"
    finally:
        provider.close()
    assert server.requests[0]["model"] == "m-7"
    assert "authorization" not in {name.lower() for name in server.headers[0]}  # no key anywhere: none sent


def test_without_a_model_name_the_remote_provider_takes_the_one_the_server_lists(serve):
    from boundctx.providers import ScriptedProvider
    from boundctx.providers.remote import served_model

    server = serve(ScriptedProvider(lambda request: "ok"), settings=config.load(env={}), model_id="listed-1")
    assert served_model(server.url, None) == "listed-1"
    provider = _remote(server.url)
    try:
        assert provider.model == "listed-1"
        assert PROVIDERS["remote"].served_name(provider) == "listed-1"  # what a boundctx serve in front lists
    finally:
        provider.close()
    assert served_model("http://127.0.0.1:9", None) is None  # nothing there: "default" stands


def test_a_remote_provider_without_a_server_is_refused_naming_the_setting_and_its_flag():
    with pytest.raises(ConfigError) as caught:
        from_settings({"chat.provider": "remote"})
    assert "remote.base_url" in str(caught.value) and "--base-url" in str(caught.value)


def test_the_remote_key_is_the_flag_then_the_variable_then_the_file(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("# the upstream's key\n\n  from-file  \n")
    s = config.load(env={}, overrides={"remote.api_key_file": str(key_file)})
    assert api_key_of(s, env={}) == "from-file"
    assert api_key_of(s, env={"BOUNDCTX_API_KEY": "from-env"}) == "from-env"
    assert api_key_of(s, given="from-flag", env={"BOUNDCTX_API_KEY": "from-env"}) == "from-flag"
    assert api_key_of(config.load(env={}), env={}) is None


@pytest.mark.parametrize("content, env, given, said", [
    ("a\nb\n", {}, None, "holds 2 keys"),
    ("# only a comment\n", {}, None, "holds no key"),
    ("one key\n", {}, None, "line 1 of the API key file"),
    ("k\n", {"BOUNDCTX_API_KEY": "  "}, None, "BOUNDCTX_API_KEY is set but blank"),
    ("k\n", {}, "sp ace", "the key of --upstream-api-key holds a space"),
])
def test_a_remote_key_that_cannot_be_sent_is_refused_saying_where_it_came_from(tmp_path, content, env, given, said):
    key_file = tmp_path / "key"
    key_file.write_text(content)
    s = config.load(env={}, overrides={"remote.api_key_file": str(key_file)})
    with pytest.raises(ValueError) as caught:
        api_key_of(s, given=given, given_by="--upstream-api-key", env=env)
    assert said in str(caught.value)
    assert "sp ace" not in str(caught.value) and "a\nb" not in str(caught.value)  # never the key itself


def test_the_key_from_the_file_is_sent_as_a_bearer_token(scripted_server, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-file-1\n")
    server = scripted_server((200, [delta("ok"), delta(finish="stop")]))
    provider = _remote(server.url, **{"remote.api_key_file": str(key_file), "remote.model": "m"})
    try:
        provider.chat([{"role": "user", "content": "q"}], max_tokens=4)
    finally:
        provider.close()
    assert {k.lower(): v for k, v in server.headers[0].items()}["authorization"] == "Bearer sk-file-1"


def test_the_local_provider_takes_no_key():
    with pytest.raises(ValueError, match="--api-key is for the remote provider"):
        from_settings({"chat.provider": "local"}, api_key="k")
