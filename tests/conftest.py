import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
PI_SESSIONS = SHARED_DATA / "pi-sessions"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Layout sidecars that cannot live beside a transcript go to the cache directory;
    # keep the tests' ones out of the user's ~/.cache.
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    # Settings: never the user's config file or BOUNDCTX_* variables.
    monkeypatch.setenv("BOUNDCTX_CONFIG", str(tmp_path_factory.mktemp("config") / "config.toml"))
    for name in list(os.environ):
        if name.startswith("BOUNDCTX_") and name not in ("BOUNDCTX_CACHE_DIR", "BOUNDCTX_CONFIG"):
            monkeypatch.delenv(name)


@pytest.fixture
def pi_session(tmp_path):
    """Copy one of the real pi sessions into a temporary folder (shared/ is read-only)."""

    def copy(name: str) -> pathlib.Path:
        src = PI_SESSIONS / name
        if not src.exists():
            pytest.skip(f"real pi session data not found at {src} (a clone without ../shared)")
        dst = tmp_path / name
        shutil.copyfile(src, dst)
        return dst

    return copy


# Hypothesis profiles. The machines are shared and noisy, so no test may fail on time:
# no per-example deadline, and slow input generation is not a health failure.
# `HYPOTHESIS_PROFILE=fuzz python -m pytest tests/native` runs the property tests as a
# longer fuzz campaign (native code must never crash, and must agree with its twins).
from hypothesis import HealthCheck, settings  # noqa: E402

_calm = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("boundctx", **_calm)
settings.register_profile("fuzz", max_examples=5000, **_calm)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "boundctx"))
