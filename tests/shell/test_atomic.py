"""Files boundctx keeps are replaced whole or not at all (boundctx._atomic)."""

import os

import pytest

from boundctx._atomic import replacing


def test_a_block_that_ends_cleanly_replaces_the_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with replacing(path) as f:
        f.write(b"new")
        assert path.read_text() == "old"  # nothing shows until the block ends
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["f.txt"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError(28, "No space left on device")])
def test_an_interrupted_block_leaves_the_old_file_and_no_temporary_one(tmp_path, error):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(type(error) if isinstance(error, BaseException) else error):
        with replacing(path) as f:
            f.write(b"half")
            raise error
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["f.txt"]


def test_through_a_symlink_the_file_is_replaced_not_the_link(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with replacing(link, mode=0o600) as f:
        f.write(b"new")
    assert link.is_symlink() and target.read_text() == "new"
    assert (target.stat().st_mode & 0o777) == 0o600
