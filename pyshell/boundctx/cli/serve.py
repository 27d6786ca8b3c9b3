"""``boundctx serve``: the OpenAI-compatible server on the chosen model."""

from __future__ import annotations

import os
import sys

from boundctx.cli._provider import add_provider_arguments, flag_overrides, make_provider

__all__ = ["add_parser", "api_keys"]


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "serve", help=summary,
        description="Serve POST /v1/chat/completions, GET /v1/models and GET /health on the embedded local "
                    "model (default) or an OpenAI-compatible server, with boundctx's fitting and section "
                    "analysis behind every reply; and boundctx's own routes under /boundctx/v1: sessions "
                    "(windows, append, edit, delete, replies as named events), count, understand, settings, "
                    "and cancelling a reply by id. Binds 127.0.0.1 unless told otherwise; any other address "
                    "needs an API key.")
    add_provider_arguments(p)
    p.add_argument("--host", metavar="ADDR", help="address to bind (serve.host, default 127.0.0.1)")
    p.add_argument("--port", type=int, metavar="N", help="port (serve.port, default 8765; 0 = any free one)")
    p.add_argument("--api-key-file", metavar="FILE", help="API keys clients may send, one per line "
                                                          "(serve.api_key_file; also $BOUNDCTX_SERVE_API_KEY)")
    p.add_argument("--sessions-dir", metavar="DIR", help="the folder of sessions under /boundctx/v1/sessions "
                                                          "(serve.sessions_dir)")
    p.add_argument("--model-id", metavar="NAME", help="the model name clients send and /v1/models lists "
                                                      "(default: the model file's name, or --model)")
    p.set_defaults(run=run)


def api_keys(settings, env=os.environ) -> frozenset[str]:
    """The keys of ``serve.api_key_file`` and ``$BOUNDCTX_SERVE_API_KEY``."""
    from boundctx._files import read_bytes

    keys = set()
    path = str(settings["serve.api_key_file"])
    if path:
        text = read_bytes(path).decode("utf-8")
        keys.update(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))
        if not keys:
            raise ValueError(f"the API key file {path!r} holds no key (one per line)")
    if env.get("BOUNDCTX_SERVE_API_KEY"):
        keys.add(env["BOUNDCTX_SERVE_API_KEY"].strip())
    return frozenset(keys)


def run(args) -> int:
    from boundctx import config
    from boundctx.errors import BoundctxError

    try:
        settings = config.load(overrides=flag_overrides(args))
        keys = api_keys(settings)
        from boundctx.serve import create_app

        provider = make_provider(args, settings)
        model_id = args.model_id or _model_id(args)
        host, port = str(settings["serve.host"]), int(settings["serve.port"])
        app = create_app(provider, settings=settings, model_id=model_id, api_keys=keys, host=host)
    except ImportError as exc:
        print(f"boundctx serve: {exc}. The server needs the serve extra: pip install 'boundctx[serve]'",
              file=sys.stderr)
        return 2
    except (BoundctxError, ValueError, OSError) as exc:
        print(f"boundctx serve: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    where = f"[{host}]" if ":" in host else host
    print(f"boundctx serve: {model_id!r} on http://{where}:{port}/v1, the front end at http://{where}:{port}/ "
          f"({'API key required' if keys else 'no API key'}; Ctrl-C stops)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="off")
    return 0


def _model_id(args) -> str:
    if args.provider == "remote":
        return args.model or "default"
    if args.model:
        return os.path.splitext(os.path.basename(args.model))[0]
    from boundctx.tokens.llama import default_model_path

    return os.path.splitext(os.path.basename(default_model_path()))[0]
