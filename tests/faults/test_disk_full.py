"""A full disk: the append fails with a clear OSError, nothing acknowledged is lost,
and once there is room again the same open Transcript appends as before.

Needs a small file system of its own: a 2 MiB tmpfs, which only root can mount (and
only where the container allows mounts); elsewhere the test skips and says why.
"""

import pytest

from . import core, disk_full
from .core import assert_clean
from tests._support import running_as_root


@pytest.fixture
def small_disk(tmp_path):
    if not running_as_root():
        pytest.skip("disk-full needs a 2 MiB tmpfs, and mounting one needs root: run the suite as root")
    mount = tmp_path / "small"
    mount.mkdir()
    why = disk_full.mount_small_tmpfs(mount)
    if why:
        pytest.skip(f"disk-full needs a 2 MiB tmpfs: {why}")
    try:
        yield mount
    finally:
        disk_full.unmount(mount)


def test_appends_on_a_full_disk_fail_clearly_lose_nothing_and_resume_once_space_is_freed(small_disk):
    tally = disk_full.disk_full(small_disk, rounds=core.scaled(5), seed=2048)
    assert_clean(tally)
    assert tally.faults == 2 * core.scaled(5)  # per round: appends on a full disk, a rewrite on one
    # Every failed append was an OSError that says the disk is full (checked per round),
    # and so was every rewrite that did not fit.
    assert sum(v for k, v in tally.notes.items() if k.startswith("full-disk errors")) == 2 * core.scaled(5)
    assert tally.notes.get("full-disk rewrites refused: OSError errno=28", 0) > 0
