"""The model options shared by commands that call a model (``ask``, ``plan``, ``serve``).

Each option that has a setting only overrides it (``--provider`` is ``chat.provider``,
``--threads`` is ``local.threads``, ``--base-url`` is ``remote.base_url``), so a config
file or a ``BOUNDCTX_*`` variable works for all of them alike, and the provider is built
from the settings alone (:func:`boundctx.providers.from_settings`). ``--model`` sets the
chosen provider's model (``local.model`` or ``remote.model``). A flag that the chosen
provider would not use (``--base-url`` with the local model, ``--threads`` with a remote
one) is refused, not ignored: a user who gave it expected it to do something.

The remote model server's key is ``--api-key`` on ``ask`` and ``plan``, where it is the
only key there is. On ``serve`` it is ``--upstream-api-key``: there ``--api-key`` is the
key clients must send to boundctx's own server, as it is for llama.cpp's server and vLLM.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from boundctx.providers.registry import PROVIDERS

if TYPE_CHECKING:
    from boundctx import config
    from boundctx.providers.base import Provider

__all__ = ["add_provider_arguments", "check_provider_flags", "load_settings", "make_provider"]

#: flag attribute -> the setting it overrides (a command that lacks a flag has no such
#: attribute, and the setting is left alone). ``--model`` is not here: which key it sets
#: depends on the provider (:func:`load_settings`).
_SETTING_OF = {
    "provider": "chat.provider",
    "n_ctx": "chat.n_ctx",
    "analysis_workers": "chat.analysis_workers",
    "temperature": "chat.temperature",
    "system": "chat.system_prompt",
    "repeat_penalty": "chat.repeat_penalty",
    "max_model_calls": "understanding.max_model_calls",
    "threads": "local.threads",
    "gpu_layers": "local.gpu_layers",
    "seed": "local.seed",
    "extra_buffers": "local.extra_buffers",
    "state_cache_mib": "local.state_cache_mib",
    "base_url": "remote.base_url",
    "host": "serve.host",
    "port": "serve.port",
    "api_key_file": "serve.api_key_file",
    "sessions_dir": "serve.sessions_dir",
}

#: flag attributes that are no setting but belong to one provider's group all the same.
_GROUP_OF_FLAG = {"upstream_api_key": "remote"}


def add_provider_arguments(p, *, upstream_key_flag: str = "--api-key") -> None:
    """The model options, with the remote server's key under ``upstream_key_flag``
    (``serve`` passes ``--upstream-api-key``: its ``--api-key`` is its clients' key)."""
    p.add_argument("--provider", choices=list(PROVIDERS),
                   help="which model answers (chat.provider, default local): "
                        + "; ".join(f"{kind.name}: {kind.summary}" for kind in PROVIDERS.values()))
    p.add_argument("--model", metavar="M", help="local: a GGUF path (local.model; default: the embedded SmolLM2); "
                                                "remote: the model name (remote.model; default: the one model "
                                                "the server lists, else 'default')")
    p.add_argument("--base-url", metavar="URL", help="remote: the server, e.g. http://127.0.0.1:8080 "
                                                     "(remote.base_url)")
    p.add_argument(upstream_key_flag, dest="upstream_api_key", metavar="KEY",
                   help="remote: the model server's bearer token (default: $BOUNDCTX_API_KEY, else the key in "
                        "remote.api_key_file)")
    p.add_argument("--n-ctx", type=int, metavar="N", help="context window (chat.n_ctx)")
    p.add_argument("--threads", type=int, metavar="N", help="local: CPU threads, 0 = llama.cpp's choice "
                                                            "(local.threads)")
    p.add_argument("--gpu-layers", type=int, metavar="N", help="local: layers offloaded to a GPU build of "
                                                               "llama-cpp-python, -1 = all (local.gpu_layers)")
    p.add_argument("--seed", type=int, metavar="N", help="local: sampling seed (local.seed)")
    p.add_argument("--extra-buffers", choices=["auto", "on", "off"],
                   help="local: llama.cpp's extra CPU buffer types; auto = off on AMX hosts (local.extra_buffers)")
    p.add_argument("--state-cache-mib", type=int, metavar="MIB",
                   help="local: MiB of evaluated prompt states kept for conversations taking turns, 0 = none "
                        "(local.state_cache_mib)")
    p.set_defaults(flag_names={"upstream_api_key": upstream_key_flag})


def load_settings(args: argparse.Namespace) -> config.Settings:
    """The settings with the command's flags over them (only the flags given), checked
    against the provider they choose (:func:`check_provider_flags`).

    Raises
    ------
    ConfigError
        A value a setting does not accept.
    ValueError
        A flag the chosen provider would not use.
    """
    from boundctx import config

    overrides: dict[str, object] = {name: getattr(args, attr) for attr, name in _SETTING_OF.items()
                                    if getattr(args, attr, None) is not None}
    settings = config.load(overrides=overrides)
    if getattr(args, "model", None) is not None:  # the chosen provider's model, wherever the choice was made
        overrides[f"{settings.chat.provider}.model"] = args.model
        settings = config.load(overrides=overrides)
    check_provider_flags(args, settings)
    return settings


def check_provider_flags(args: argparse.Namespace, settings: config.Settings) -> None:
    """Refuse a flag the chosen provider would not use: one that sets a key of another
    provider's group (ValueError naming the flags and where the choice came from)."""
    provider = settings.chat.provider

    def group(attr: str) -> str:
        return _GROUP_OF_FLAG.get(attr) or _SETTING_OF.get(attr, "").split(".", 1)[0]

    others = {kind.group: name for name, kind in PROVIDERS.items() if name != provider}
    given = [attr for attr in [*_SETTING_OF, *_GROUP_OF_FLAG]
             if group(attr) in others and getattr(args, attr, None) is not None]
    if not given:
        return
    names = getattr(args, "flag_names", {})
    flags = [names.get(attr, "--" + attr.replace("_", "-")) for attr in given]
    other = others[group(given[0])]
    source = settings.source("chat.provider")
    chosen = f"--provider {provider}" + ("" if source == "override" else " (the default)" if source == "default"
                                         else f" (chat.provider, from {source})")
    one = len(flags) == 1
    listed = ", ".join(flags[:-1]) + " and " + flags[-1] if len(flags) > 1 else flags[0]
    raise ValueError(f"{listed} {'has' if one else 'have'} no effect with {chosen} "
                     f"({'it is' if one else 'they are'} for --provider {other}); leave {'it' if one else 'them'} "
                     f"out, or use --provider {other}")


def make_provider(args: argparse.Namespace, settings: config.Settings) -> Provider:
    """The provider ``settings`` choose (made by :func:`load_settings`), with the remote
    key of the command line (ValueError / ImportError / BoundctxError / OSError when it
    cannot be made)."""
    from boundctx.providers.registry import from_settings

    flag = getattr(args, "flag_names", {}).get("upstream_api_key", "--api-key")
    return from_settings(settings, api_key=getattr(args, "upstream_api_key", None), api_key_flag=flag)
