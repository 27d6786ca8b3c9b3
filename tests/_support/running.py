"""A real boundctx serve on loopback: uvicorn in a thread, on a free port."""

import threading
import time


class Running:
    def __init__(self, app, **config):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="off", **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("boundctx serve did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = app

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)
        close = getattr(self.app, "close", None)
        if close is not None:  # boundctx's own app: its database connections, if any
            close()
