"""Chunked arrays (sidecar segments + appends) behave like one concatenated array."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx.transcript import arrays
from boundctx.transcript.arrays import Chunked, FileArray, SidecarFile

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


# -- a large array read from a sidecar ------------------------------------------------


class _CountedSidecar(SidecarFile):
    """A sidecar that notes the length of every read."""

    __slots__ = ("reads",)

    def pread(self, offset: int, length: int) -> bytes:
        self.reads.append(length)
        return super().pread(offset, length)


def _file_array(tmp_path, values: np.ndarray) -> tuple[FileArray, list[int]]:
    """``values`` as a sidecar's increasing array, and the list its reads are noted in."""
    path = tmp_path / "array.bin"
    path.write_bytes(b"head" + values.astype("<i8").tobytes())
    sidecar = _CountedSidecar(str(path))
    sidecar.reads = []
    return FileArray(sidecar, 4, len(values), np.int64, increasing=True), sidecar.reads


def _spread(kind: str, n: int, rng) -> np.ndarray:
    if kind == "even":  # line numbers of messages: a non-message line now and then
        gaps = 1 + (rng.random(n) < 0.01)
    elif kind == "lengths":  # line offsets: lengths of a few hundred bytes, a huge line now and then
        gaps = rng.integers(1, 2000, n) + (rng.random(n) < 0.001) * 5_000_000
    elif kind == "doubling":  # no even spread at all: each gap a little larger than the last
        gaps = np.ceil(1.0002 ** np.arange(n)).astype(np.int64)
    else:  # "clustered": dense runs between far jumps
        gaps = np.where(np.arange(n) % 5000 == 0, 10**12, 1)
    return np.cumsum(gaps).astype(np.int64) - 1000


@pytest.mark.parametrize("size", [1, 5, arrays._KEPT, arrays._KEPT + 1, 3 * arrays._PROBE + arrays._KEPT,
                                  arrays._SMALL + 7 * arrays._PROBE + 13])
@pytest.mark.parametrize("kind", ["even", "lengths", "doubling", "clustered"])
def test_a_file_array_is_searched_as_the_array_it_holds(tmp_path, kind, size):
    rng = np.random.default_rng(7)
    values = _spread(kind, size, rng)
    fa, reads = _file_array(tmp_path, values)
    picks = values[rng.integers(0, len(values), 300)]
    probes = [values[0] - 1, values[0], values[-1] - 1, values[-1], values[-1] + 1, *picks, *(picks - 1), *(picks + 1),
              *rng.integers(int(values[0]), int(values[-1]) + 1, 100)]
    for v in probes:
        assert fa.searchsorted_right(int(v)) == int(np.searchsorted(values, v, side="right")), v
    # Without an even spread a search still costs about a bisection's reads at most.
    assert len(reads) <= 2 + len(probes) * 2 * (1 + max(0, int(np.log2(len(values) / arrays._PROBE))))


def test_a_search_of_evenly_spread_values_reads_a_probe_or_two(tmp_path):
    """Line numbers grow about one a message: where the ends put a value is where it
    is, so a search reads once or twice past the ends, where a bisection read once
    per halving (eleven times for this array)."""
    rng = np.random.default_rng(3)
    values = _spread("even", 700_000, rng)
    fa, reads = _file_array(tmp_path, values)
    fa.searchsorted_right(int(values[0]))  # the ends, read once
    for v in values[rng.integers(0, len(values), 50)]:
        reads.clear()
        assert fa.searchsorted_right(int(v)) == int(np.searchsorted(values, v, side="right"))
        assert len(reads) <= 2


def test_a_slice_of_bytes_runs_like_a_slice_even_backwards(tmp_path):
    values = _spread("lengths", arrays._KEPT + 900, np.random.default_rng(5))
    fa, _reads = _file_array(tmp_path, values)
    ch = Chunked([fa])  # read from the file, not kept: more than _KEPT elements
    for lo, hi in [(0, 5), (4000, 100), (len(values), 3), (len(values) - 3, len(values) + 5), (-4, 2), (7, 7),
                   (arrays._KEPT + 890, arrays._KEPT + 905)]:
        assert ch.slice_bytes(lo, hi) == values[max(lo, 0) : max(hi, 0)].tobytes(), (lo, hi)


@pytest.mark.parametrize("size", [arrays._KEPT + 1, 20_000])
def test_an_array_searched_whole_is_caught_lying_anywhere(tmp_path, size):
    """Up to _SMALL elements a search reads the array whole, so its order is checked
    whole: a lie far from the value searched is caught, not answered around."""
    values = _spread("even", size, np.random.default_rng(9))
    lied = values.copy()
    lied[size // 4] = lied[size // 4 - 5]
    fa, _reads = _file_array(tmp_path, lied)
    with pytest.raises(arrays.SidecarLies):
        fa.searchsorted_right(int(values[size * 3 // 4]))


def test_a_probed_array_is_caught_lying_where_a_probe_lands_and_at_its_ends(tmp_path):
    size = arrays._SMALL + 3 * arrays._PROBE
    values = _spread("even", size, np.random.default_rng(11))
    mid = size // 2
    lied = values.copy()
    lied[mid - 2000 : mid + 2000] += 10**12  # rising inside the probe, above all that follows it
    fa, _reads = _file_array(tmp_path, lied)
    with pytest.raises(arrays.SidecarLies):
        fa.searchsorted_right(int(values[mid]))
    ends = values.copy()
    ends[-1] = ends[0] - 1
    (tmp_path / "ends").mkdir()
    fb, _reads = _file_array(tmp_path / "ends", ends)
    with pytest.raises(arrays.SidecarLies):
        fb.searchsorted_right(int(values[mid]))


@pytest.mark.parametrize("picks", [[0, 69_999, 140_000, 209_999], [209_999, 3, 100_000], [70_000, 69_999, 70_002]])
def test_take_gathers_across_chunks_scattered_or_dense(picks):
    """Scattered indices are gathered chunk by chunk; indices close together (a window's)
    are picked from one slice of their span. Either gives the elements asked for."""
    n = 70_000  # past arrays._SMALL, so the chunks stay apart
    flat = np.arange(3 * n, dtype=np.int64) * 3 + 1
    ch = Chunked([flat[:n], flat[n : 2 * n].copy(), flat[2 * n :]])
    assert ch.chunk_count == 3
    idx = np.array(picks, dtype=np.int64)
    assert ch.take(idx).tolist() == flat[idx].tolist()
    with pytest.raises(IndexError):
        ch.take(np.array([0, 3 * n], dtype=np.int64))
