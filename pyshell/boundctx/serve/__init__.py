"""``boundctx serve``: an OpenAI-compatible HTTP server with boundctx's bounds behind it.

Needs the ``serve`` extra (Starlette and uvicorn): ``pip install "boundctx[serve]"``.
"""

from boundctx.serve.app import ServeError, create_app, is_loopback

__all__ = ["ServeError", "create_app", "is_loopback"]
