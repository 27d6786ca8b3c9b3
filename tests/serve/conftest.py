"""A real boundctx serve on loopback (uvicorn in a thread, port 0) for each test."""

import pytest

pytest.importorskip("starlette", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")
pytest.importorskip("uvicorn", reason="boundctx serve needs the serve extra (pip install 'boundctx[serve]')")


@pytest.fixture
def serve(tmp_path):
    """``serve(provider, **create_app options)`` -> a running server (``.url``); its
    sessions folder is in tmp_path unless given."""
    from boundctx.serve import create_app
    from serve.running import Running

    started = []

    def start(provider, **options):
        options.setdefault("sessions_dir", str(tmp_path / "sessions"))
        running = Running(create_app(provider, **options))
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()
