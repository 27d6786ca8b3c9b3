"""``python -m tests._support.scripted_server SESSIONS_DIR [slow]``: boundctx serve with the scripted
model in a process of its own, on a free loopback port it prints first (for tests that
need several server processes sharing one sessions folder, or a server to kill
mid-reply: ``slow`` answers a word every 20 ms for a minute)."""

import socket
import sys
import time

import uvicorn

from boundctx import config
from boundctx.providers import ScriptedProvider
from boundctx.serve import create_app


def slowly(request):
    def words():
        for i in range(3000):
            time.sleep(0.02)
            yield f"w{i} "
    return words()


def main() -> None:
    respond = slowly if sys.argv[2:3] == ["slow"] else (lambda request: "ok")
    app = create_app(ScriptedProvider(respond), settings=config.load(env={}), model_id="scripted",
                     sessions_dir=sys.argv[1])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
