"""The model options shared by commands that call a model (``ask``, ``plan``)."""

from __future__ import annotations

__all__ = ["add_provider_arguments", "make_provider"]


def add_provider_arguments(p) -> None:
    p.add_argument("--provider", choices=["local", "remote"], default="local")
    p.add_argument("--model", metavar="M", help="local: a GGUF path (default: the embedded SmolLM2); "
                                                "remote: the model name")
    p.add_argument("--base-url", metavar="URL", help="remote: the server, e.g. http://127.0.0.1:8080")
    p.add_argument("--api-key", metavar="KEY", help="remote: bearer token")
    p.add_argument("--n-ctx", type=int, metavar="N", help="context window (chat.n_ctx)")


def make_provider(args, n_ctx: int):
    """The provider the options ask for (ValueError / ImportError / BoundctxError when
    they cannot be met)."""
    if args.provider == "local":
        from boundctx.providers.local import LlamaCppProvider

        return LlamaCppProvider(args.model, n_ctx=n_ctx)
    if not args.base_url:
        raise ValueError("--provider remote needs --base-url (an OpenAI-compatible server)")
    from boundctx.providers.remote import OpenAICompatibleProvider

    return OpenAICompatibleProvider(args.base_url, model=args.model or "default", api_key=args.api_key,
                                    context_window=n_ctx)
