"""The path of an open transcript replaced by another program: follow the new file or
refuse with a TranscriptError; never the old data, never an empty window, never a
blocked read, never a write outside the file the path names."""

import pytest

from . import path_replacement
from .core import assert_clean


@pytest.mark.parametrize("kind", list(path_replacement.REPLACEMENTS))
def test_an_open_transcript_follows_or_refuses_when_its_path_is_replaced(tmp_path, kind):
    tally = path_replacement.path_replacement(tmp_path, kinds=(kind,), seed=len(kind))
    assert_clean(tally)
    assert tally.faults == 1
