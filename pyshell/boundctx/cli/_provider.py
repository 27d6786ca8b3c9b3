"""The model options shared by commands that call a model (``ask``, ``plan``).

Each option that has a setting only overrides it (``--threads`` is ``local.threads``),
so a config file or a ``BOUNDCTX_*`` variable works for all of them alike.
"""

from __future__ import annotations

import os

__all__ = ["add_provider_arguments", "flag_overrides", "make_provider"]

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
    "host": "serve.host",
    "port": "serve.port",
    "api_key_file": "serve.api_key_file",
    "sessions_dir": "serve.sessions_dir",
}


def add_provider_arguments(p) -> None:
    p.add_argument("--provider", choices=["local", "remote"], default="local")
    p.add_argument("--model", metavar="M", help="local: a GGUF path (default: the embedded SmolLM2); "
                                                "remote: the model name (default: the one model the server "
                                                "lists, else 'default')")
    p.add_argument("--base-url", metavar="URL", help="remote: the server, e.g. http://127.0.0.1:8080")
    p.add_argument("--api-key", metavar="KEY", help="remote: bearer token (default: $BOUNDCTX_API_KEY)")
    p.add_argument("--n-ctx", type=int, metavar="N", help="context window (chat.n_ctx)")
    p.add_argument("--threads", type=int, metavar="N", help="local: CPU threads, 0 = llama.cpp's choice "
                                                            "(local.threads)")
    p.add_argument("--gpu-layers", type=int, metavar="N", help="local: layers offloaded to a GPU build of "
                                                               "llama-cpp-python, -1 = all (local.gpu_layers)")
    p.add_argument("--seed", type=int, metavar="N", help="local: sampling seed (local.seed)")
    p.add_argument("--extra-buffers", choices=["auto", "on", "off"],
                   help="local: llama.cpp's extra CPU buffer types; auto = off on AMX hosts (local.extra_buffers)")


def flag_overrides(args) -> dict[str, object]:
    """The settings the command's flags override (only the flags given)."""
    return {name: getattr(args, attr) for attr, name in _SETTING_OF.items() if getattr(args, attr, None) is not None}


def make_provider(args, settings):
    """The provider the options and ``settings`` ask for (ValueError / ImportError /
    BoundctxError when they cannot be met)."""
    if args.provider == "local":
        from boundctx.providers.local import LlamaCppProvider

        return LlamaCppProvider(args.model, settings=settings)  # every knob from the settings
    if not args.base_url:
        raise ValueError("--provider remote needs --base-url (an OpenAI-compatible server)")
    from boundctx.providers.remote import OpenAICompatibleProvider

    api_key = args.api_key or os.environ.get("BOUNDCTX_API_KEY") or None
    model = args.model or served_model(args.base_url, api_key) or "default"
    return OpenAICompatibleProvider(args.base_url, model=model, api_key=api_key,
                                    context_window=int(settings["chat.n_ctx"]))


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
