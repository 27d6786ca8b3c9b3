"""The chat models a user chooses by name (``chat.provider``, ``--provider``).

Each entry says what its name means, which group of settings it reads, how to build it
from resolved settings, and the name ``boundctx serve`` lists it under. The command
line, the server and the Python API all build a provider through :func:`from_settings`,
so adding one is an entry here plus its module (decision 0035). Nothing heavy is
imported until a provider is built: describing a command reads this table.

The scripted provider is not here: it is built from a script in code, never from
settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from boundctx import config
    from boundctx.providers.base import Provider

__all__ = ["PROVIDERS", "ProviderKind", "from_settings"]


class ProviderKind(NamedTuple):
    """One provider a user can choose.

    Attributes
    ----------
    name : str
        Its value of ``chat.provider``.
    summary : str
        What it is, for help text.
    group : str
        The settings group only it reads (``local``: ``local.*``); a flag that sets a key
        of another provider's group is refused, not ignored.
    build : callable
        ``build(settings, api_key, api_key_flag)`` -> the provider. ``api_key`` is a key
        given on the command line or in code (None: the provider's own settings decide).
    served_name : callable
        ``served_name(provider)`` -> the model name ``boundctx serve`` lists by default.
    """

    name: str
    summary: str
    group: str
    build: Callable[[config.Settings, str | None, str], Provider]
    served_name: Callable[[Any], str]


def _local(settings: config.Settings, api_key: str | None, api_key_flag: str) -> Provider:
    if api_key is not None:
        raise ValueError(f"{api_key_flag} is for the remote provider; the local model takes no API key")
    from boundctx.providers.local import LlamaCppProvider

    return LlamaCppProvider(settings=settings)  # every knob, the model file too, from the settings


def _remote(settings: config.Settings, api_key: str | None, api_key_flag: str) -> Provider:
    from boundctx.providers.remote import OpenAICompatibleProvider

    return OpenAICompatibleProvider.from_settings(settings, api_key=api_key, api_key_flag=api_key_flag)


def _file_stem(provider: Any) -> str:
    return os.path.splitext(os.path.basename(provider.model_path))[0]


#: Every provider, by its ``chat.provider`` name (the key's choices, in this order).
PROVIDERS: dict[str, ProviderKind] = {kind.name: kind for kind in (
    ProviderKind("local", "a GGUF model run in this process by llama.cpp (default: the embedded SmolLM2)",
                 "local", _local, _file_stem),
    ProviderKind("remote", "a model behind an OpenAI-compatible server (llama.cpp's, vLLM, a hosted API)",
                 "remote", _remote, lambda provider: provider.model),
)}


def from_settings(settings: Mapping[str, Any] | None = None, *, api_key: str | None = None,
                  api_key_flag: str = "--api-key") -> Provider:
    """The provider ``chat.provider`` names, built from ``settings``.

    Parameters
    ----------
    settings : mapping, optional
        Resolved settings or a partial mapping (``{"chat.provider": "remote",
        "remote.base_url": "http://127.0.0.1:8080"}``); default :func:`boundctx.config.load`.
    api_key : str, optional
        The remote server's key, over ``$BOUNDCTX_API_KEY`` and ``remote.api_key_file``.
    api_key_flag : str
        What the key was given as, for error messages.

    Raises
    ------
    ConfigError, ValueError, OSError, ImportError
        Settings the provider cannot be built from (the message says which), a key
        given to a provider that takes none, a key file that cannot be read, a missing
        optional dependency.
    """
    from boundctx import config

    s = config.resolve(settings)
    return PROVIDERS[s.chat.provider].build(s, api_key, api_key_flag)
