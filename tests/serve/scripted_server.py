"""``python scripted_server.py SESSIONS_DIR``: boundctx serve with the scripted model in
a process of its own, on a free loopback port it prints first (for tests that need
several server processes sharing one sessions folder)."""

import socket
import sys

import uvicorn

from boundctx import config
from boundctx.providers import ScriptedProvider
from boundctx.serve import create_app


def main() -> None:
    app = create_app(ScriptedProvider(lambda request: "ok"), settings=config.load(env={}),
                     model_id="scripted", sessions_dir=sys.argv[1])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
