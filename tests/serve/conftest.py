"""A real boundctx serve on loopback (uvicorn in a thread, port 0) for each test."""

import pytest

pytest.importorskip("starlette", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")
pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")


@pytest.fixture
def serve():
    """``serve(provider, **create_app options)`` -> a running server (``.url``)."""
    from boundctx.serve import create_app
    from serve.running import Running

    started = []

    def start(provider, **options):
        running = Running(create_app(provider, **options))
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()
