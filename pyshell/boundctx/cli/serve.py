"""``boundctx serve``: the OpenAI-compatible server on the chosen model.

``--api-key`` is the key clients must send to this server, as it is for llama.cpp's
server and vLLM; the remote model server's own key is ``--upstream-api-key``. Every key
clients may send (``--api-key``, ``serve.api_key_file``, ``$BOUNDCTX_SERVE_API_KEY``) is
one word of printable ASCII: a blank one would match a request that sends none, and one
with a space or a control character could never be sent in a header as it was written.
"""

from __future__ import annotations

import errno
import os
import sys

from boundctx import config
from boundctx.cli._provider import add_provider_arguments, load_settings, make_provider
from boundctx.providers.registry import PROVIDERS

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
    add_provider_arguments(p, upstream_key_flag="--upstream-api-key")
    p.add_argument("--host", metavar="ADDR", help="address to bind (serve.host, default 127.0.0.1)")
    p.add_argument("--port", type=int, metavar="N", help="port (serve.port, default 8765; 0 = any free one)")
    p.add_argument("--api-key", dest="api_keys", action="append", metavar="KEY",
                   help="a key clients must send as 'Authorization: Bearer KEY' (repeatable; joins those of "
                        "--api-key-file and $BOUNDCTX_SERVE_API_KEY). Other users of the machine can read it "
                        "in the process list: the file or the variable keeps it private")
    p.add_argument("--api-key-file", metavar="FILE", help="API keys clients may send, one per line, # for a "
                                                          "comment (serve.api_key_file)")
    p.add_argument("--sessions-dir", metavar="DIR|URL", help="the folder of sessions under /boundctx/v1/sessions, "
                                                              "or a postgresql:// URL of the database that keeps "
                                                              "them (serve.sessions_dir)")
    p.add_argument("--model-id", metavar="NAME", help="the model name clients send and /v1/models lists "
                                                      "(default: the local model file's name, or the remote model's)")
    p.set_defaults(run=run)


def api_keys(settings: config.Settings, env=os.environ, given=()) -> frozenset[str]:
    """The keys clients may send: ``given`` (``--api-key``), those of
    ``serve.api_key_file`` and ``$BOUNDCTX_SERVE_API_KEY``.

    Raises
    ------
    ValueError
        A blank key, or one with a space, a control character or a character that is
        not ASCII, saying where it came from (never the key itself).
    """
    from boundctx._keys import checked_key, key_in_variable, keys_in_file

    keys = {checked_key(key, "--api-key") for key in given}
    if settings.serve.api_key_file:
        keys.update(keys_in_file(settings.serve.api_key_file))
    variable = key_in_variable(env, "BOUNDCTX_SERVE_API_KEY")
    if variable is not None:
        keys.add(variable)
    return frozenset(keys)


def run(args) -> int:
    from boundctx.errors import BoundctxError

    try:
        settings = load_settings(args)
        keys = api_keys(settings, given=args.api_keys or ())
        from boundctx.serve import create_app

        provider = make_provider(args, settings)
        model_id = args.model_id or PROVIDERS[settings.chat.provider].served_name(provider)
        host, port = settings.serve.host, settings.serve.port
        app = create_app(provider, settings=settings, model_id=model_id, api_keys=keys, host=host)
    except ImportError as exc:
        print(f"boundctx serve: {exc}. The server needs the serve extra: pip install 'boundctx[serve]'",
              file=sys.stderr)
        return 2
    except (BoundctxError, ValueError, OSError) as exc:
        print(f"boundctx serve: {exc}", file=sys.stderr)
        return 2
    from boundctx.serve.connections import run_server

    def say(text: str) -> None:
        print(f"boundctx serve: {text}", file=sys.stderr, flush=True)

    where = f"[{host}]" if ":" in host else host

    def banner(bound: int) -> str:  # the port bound: the free one chosen for --port 0
        return (f"{model_id!r} on http://{where}:{bound}/v1, the front end at http://{where}:{bound}/ "
                f"({'API key required' if keys else 'no API key'}; Ctrl-C stops)")

    try:
        started = run_server(app, host, port, settings=settings, say=say, banner=banner)
    except RuntimeError as exc:
        say(str(exc))
        return 2
    except OSError as exc:  # the address, before anything was said or served
        hint = (": another process listens there; stop it, or choose another port with --port (0 = any free one)"
                if exc.errno == errno.EADDRINUSE else "; choose another with --host or --port")
        say(f"{exc.strerror}{hint}")
        return 2
    finally:
        app.close()  # the sessions database's connections, when there is one
    return 0 if started else 1
