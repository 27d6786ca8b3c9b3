"""Chunked arrays (sidecar segments + appends) behave like one concatenated array."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from boundctx.transcript.arrays import Chunked

chunk_lists = st.lists(st.lists(st.integers(0, 50), max_size=20), max_size=6)


def build(chunks):
    flat = np.cumsum([v for c in chunks for v in c]).astype(np.int64)  # sorted, like offsets
    pieces, pos = [], 0
    for c in chunks:
        arr = flat[pos : pos + len(c)]
        pieces.append(arr.copy() if len(c) % 2 else arr)  # owned and view chunks both
        pos += len(c)
    return Chunked(pieces), flat


@given(chunk_lists, st.data())
def test_chunked_matches_the_concatenated_array(chunks, data):
    ch, flat = build(chunks)
    assert len(ch) == len(flat)
    assert ch.all().tolist() == flat.tolist()
    if len(flat):
        i = data.draw(st.integers(0, len(flat) - 1))
        assert ch[i] == flat[i]
        idx = np.array(sorted(data.draw(st.lists(st.integers(0, len(flat) - 1), max_size=10))), dtype=np.int64)
        assert ch.take(idx).tolist() == flat[idx].tolist()
    lo = data.draw(st.integers(-2, len(flat) + 2))
    hi = data.draw(st.integers(-2, len(flat) + 2))
    assert ch.slice(lo, hi).tolist() == flat[max(lo, 0) : max(hi, 0)].tolist()
    v = data.draw(st.integers(-1, int(flat[-1]) + 1 if len(flat) else 5))
    assert ch.bisect_right(v) == int(np.searchsorted(flat, v, side="right"))
