"""The reference web front end, served at ``/`` (its files under ``/ui/``).

Plain files from the package's ``web`` folder: the page, its style sheet and its ES
modules, one concern each (``app.js`` names them), loaded by the browser as they are:
no build step, nothing from another origin. Every answer carries a content security
policy that forbids inline script and style and any origin but this server's, so the
page runs only the code shipped here. The page itself holds no data: it is served
without the API key, which the page asks for and sends with every API call.
"""

from __future__ import annotations

import pathlib

__all__ = ["ui_routes"]

WEB = pathlib.Path(__file__).with_name("web")
_JS = "text/javascript; charset=utf-8"
#: The only files served, and their types: a name not listed is a 404, never a path.
#: The page's ES modules (app.js imports the others) are served alike.
FILES = {"index.html": "text/html; charset=utf-8", "app.css": "text/css; charset=utf-8",
         **{name: _JS for name in ("app.js", "api.js", "page.js", "keep.js", "session.js", "chat.js", "clock.js",
                                   "gauge.js", "settings.js", "attach.js", "markdown.js", "edits.js")}}
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": POLICY, "x-content-type-options": "nosniff", "cache-control": "no-cache",
           "referrer-policy": "no-referrer"}


def _file(name: str):
    from starlette.responses import Response

    from boundctx.serve.http import ApiError

    kind = FILES.get(name)
    if kind is None:
        raise ApiError(404, f"no such front-end file: {name!r}", "not_found")
    return Response((WEB / name).read_bytes(), media_type=kind, headers=HEADERS)


def ui_routes() -> list:
    from starlette.routing import Route

    async def index(request):
        return _file("index.html")

    async def asset(request):
        return _file(request.path_params["name"])

    async def icon(request):  # browsers ask for one; none is shipped
        from starlette.responses import Response

        return Response(status_code=204, headers=HEADERS)

    return [Route("/", index, methods=["GET"]), Route("/ui/{name}", asset, methods=["GET"]),
            Route("/favicon.ico", icon, methods=["GET"])]
