"""The model options shared by commands that call a model (``ask``, ``plan``, ``serve``).

Each option that has a setting only overrides it (``--threads`` is ``local.threads``),
so a config file or a ``BOUNDCTX_*`` variable works for all of them alike. A flag that
the chosen provider would not use (``--base-url`` with ``--provider local``, ``--threads``
with ``--provider remote``) is refused, not ignored: a user who gave it expected it to do
something.

The remote model server's key is ``--api-key`` on ``ask`` and ``plan``, where it is the
only key there is. On ``serve`` it is ``--upstream-api-key``: there ``--api-key`` is the
key clients must send to boundctx's own server, as it is for llama.cpp's server and vLLM.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from boundctx import config
    from boundctx.providers.base import Provider

__all__ = ["add_provider_arguments", "check_provider_flags", "flag_overrides", "make_provider"]

#: flag attribute -> the setting it overrides (a command that lacks a flag has no such
#: attribute, and the setting is left alone).
_SETTING_OF = {
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
    "host": "serve.host",
    "port": "serve.port",
    "api_key_file": "serve.api_key_file",
    "sessions_dir": "serve.sessions_dir",
}


#: flag attribute -> the provider that uses it; each given with the other provider is refused.
_ONLY_WITH = {
    "base_url": "remote",
    "upstream_api_key": "remote",
    "threads": "local",
    "gpu_layers": "local",
    "seed": "local",
    "extra_buffers": "local",
    "state_cache_mib": "local",
}


def add_provider_arguments(p, *, upstream_key_flag: str = "--api-key") -> None:
    """The model options, with the remote server's key under ``upstream_key_flag``
    (``serve`` passes ``--upstream-api-key``: its ``--api-key`` is its clients' key)."""
    p.add_argument("--provider", choices=["local", "remote"], default="local")
    p.add_argument("--model", metavar="M", help="local: a GGUF path (default: the embedded SmolLM2); "
                                                "remote: the model name (default: the one model the server "
                                                "lists, else 'default')")
    p.add_argument("--base-url", metavar="URL", help="remote: the server, e.g. http://127.0.0.1:8080")
    p.add_argument(upstream_key_flag, dest="upstream_api_key", metavar="KEY",
                   help="remote: the model server's bearer token (default: $BOUNDCTX_API_KEY)")
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


def flag_overrides(args) -> dict[str, object]:
    """The settings the command's flags override (only the flags given)."""
    return {name: getattr(args, attr) for attr, name in _SETTING_OF.items() if getattr(args, attr, None) is not None}


def check_provider_flags(args) -> None:
    """Refuse a flag the chosen provider would not use (ValueError naming it)."""
    given = [attr for attr, provider in _ONLY_WITH.items()
             if provider != args.provider and getattr(args, attr, None) is not None]
    if not given:
        return
    names = getattr(args, "flag_names", {})
    flags = [names.get(attr, "--" + attr.replace("_", "-")) for attr in given]
    other = "remote" if args.provider == "local" else "local"
    one = len(flags) == 1
    listed = ", ".join(flags[:-1]) + " and " + flags[-1] if len(flags) > 1 else flags[0]
    raise ValueError(f"{listed} {'has' if one else 'have'} no effect with --provider {args.provider} "
                     f"({'it is' if one else 'they are'} for --provider {other}); leave {'it' if one else 'them'} "
                     f"out, or use --provider {other}")


def make_provider(args: argparse.Namespace, settings: config.Settings) -> Provider:
    """The provider the options and ``settings`` ask for (ValueError / ImportError /
    BoundctxError when they cannot be met, or when a flag is one the provider would
    not use)."""
    check_provider_flags(args)
    if args.provider == "local":
        from boundctx.providers.local import LlamaCppProvider

        return LlamaCppProvider(args.model, settings=settings)  # every knob from the settings
    if not args.base_url:
        raise ValueError("--provider remote needs --base-url (an OpenAI-compatible server)")
    from boundctx.providers.remote import OpenAICompatibleProvider

    api_key = args.upstream_api_key or os.environ.get("BOUNDCTX_API_KEY") or None
    model = args.model or served_model(args.base_url, api_key) or "default"
    return OpenAICompatibleProvider(args.base_url, model=model, api_key=api_key,
                                    context_window=settings.chat.n_ctx)


def served_model(base_url: str, api_key: str | None) -> str | None:
    """The one model a server lists at ``/v1/models``, when it lists exactly one: a
    server that checks the name (boundctx serve, vLLM) refuses a made-up one, and a user
    who did not pass ``--model`` meant the model that is there. None when the listing is
    missing, fails, or names several (then ``--model`` must choose)."""
    import httpx

    from boundctx._http import bearer, server_root

    try:
        r = httpx.get(server_root(base_url) + "/v1/models", timeout=5, headers=bearer(api_key))
        data = r.json().get("data") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):  # a bad base_url is a ConfigError(ValueError)
        return None
    ids = [m.get("id") for m in data or () if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return ids[0] if len(ids) == 1 else None
