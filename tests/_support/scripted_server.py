"""``python -m tests._support.scripted_server SESSIONS_DIR [slow | words=N]``: boundctx serve with
the scripted model in a process of its own, on a free loopback port it prints first (for
tests that need several server processes sharing one sessions folder or database, or a
server to kill mid-reply: ``slow`` answers a word every 20 ms for a minute, ``words=N``
answers N words at that pace)."""

import socket
import sys
import time

import uvicorn

from boundctx import config
from boundctx.providers import ScriptedProvider
from boundctx.serve import create_app


def paced(n: int):
    def respond(request):
        def words():
            for i in range(n):
                time.sleep(0.02)
                yield f"w{i} "
        return words()
    return respond


def main() -> None:
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    if mode == "slow":
        respond = paced(3000)
    elif mode.startswith("words="):
        respond = paced(int(mode[len("words="):]))
    else:
        respond = lambda request: "ok"  # noqa: E731
    app = create_app(ScriptedProvider(respond), settings=config.load(env={}), model_id="scripted",
                     sessions_dir=sys.argv[1])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
