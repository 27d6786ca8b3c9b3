"""Micro benchmarks of the transcript store (pytest-benchmark).

Not part of the default suite (``testpaths = ["tests"]``); run them by name::

    python -m pytest bench/ --benchmark-enable            # timed
    python -m pytest bench/test_bench_transcript.py -q    # once each, as plain tests

Each case asserts what the benchmarked call returned, so a fast wrong answer fails.
Speed is compared between rows (native vs the reference twin), never asserted.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from boundctx._native import lineindex as li
from boundctx.transcript import Transcript, encode_record
from boundctx.transcript.dialects import dialect_kinds, native_table
from boundctx.transcript.sample import write_sample

try:
    from tests.reference import lineindex as ref
except ImportError:  # a checkout without the twin: its cases skip
    ref = None

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Sidecars that cannot live beside a transcript go to the cache dir: keep it private.
    monkeypatch.setenv("BOUNDCTX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """A ~4 MB seeded transcript with a few 256 KiB-1 MiB tool outputs."""
    path = tmp_path_factory.mktemp("bench") / "sample.jsonl"
    counts = write_sample(path, target_bytes=4_000_000, seed=1234, big_every=1000,
                          big_bytes=(256 << 10, 1 << 20), compaction_every=1000)
    return path, counts


@pytest.fixture(scope="module")
def one_mib(sample):
    """The first 1 MiB of the sample (ends mid-line: a torn tail, as in a real scan)."""
    path, _ = sample
    with open(path, "rb") as f:
        data = f.read(MiB)
    assert len(data) == MiB
    return data


def _expected_scan(data: bytes):
    lines = data.count(b"\n")
    indexed_end = data.rindex(b"\n") + 1
    return lines, indexed_end


def test_scan_bytes_native_1mib(benchmark, one_mib):
    table = native_table("auto")
    res = benchmark(li.scan_bytes, one_mib, table)
    lines, indexed_end = _expected_scan(one_mib)
    starts = np.frombuffer(res.starts, dtype=np.int64)
    assert len(starts) == lines
    assert res.indexed_end == indexed_end and res.scanned_end == MiB
    kinds = np.frombuffer(res.kinds, dtype=np.uint8)
    assert int((kinds == li.MESSAGE).sum()) == lines - 1 - int((kinds == li.COMPACTION).sum())


@pytest.mark.skipif(ref is None, reason="tests/reference/lineindex.py not importable")
def test_scan_bytes_reference_1mib(benchmark, one_mib):
    res = benchmark(ref.scan_bytes, one_mib, dialect_kinds("auto"))
    lines, indexed_end = _expected_scan(one_mib)
    assert len(res.starts) == lines and res.indexed_end == indexed_end
    native = li.scan_bytes(one_mib, native_table("auto"))
    assert np.frombuffer(native.starts, dtype=np.int64).tolist() == list(res.starts)
    assert list(native.kinds) == list(res.kinds)


def test_open_window_renderer(benchmark, sample):
    path, counts = sample
    with Transcript.open(path) as t:  # build the sidecar once
        assert t.message_count == counts["messages"]

    def open_window():
        with Transcript.open(path) as t:
            return t.window(preset="renderer"), t.layout_outcome

    w, outcome = benchmark(open_window)
    assert outcome == "valid"
    assert len(w.messages) == 100
    assert w.message_start == counts["messages"] - 100 and w.has_more_before
    assert all(m.record is not None and len(m.record["message"]["content"][0]["text"]) > 0
               for m in w.messages)


def test_open_window_renderer_with_big_line(benchmark, sample):
    """A window holding a 256 KiB-1 MiB tool output: it is read as a prefix and cut."""
    path, counts = sample
    with Transcript.open(path) as t:
        starts = t._layout.starts.all()
        lens = np.diff(np.append(starts, t._layout.indexed_end))
        msgs = t._layout.messages.all()
        biggest = int(np.argmax(lens[msgs]))
    before = min(biggest + 50, counts["messages"])

    def open_window():
        with Transcript.open(path) as t:
            return t.window(message_before=before, preset="renderer")

    w = benchmark(open_window)
    assert len(w.messages) == 100
    big = w.messages[biggest - w.message_start]
    assert big.truncated and big.cut_bytes > 0


@pytest.mark.parametrize("sync", [False, True], ids=["nosync", "fsync"])
def test_append_small_record(benchmark, sample, tmp_path, sync):
    path = tmp_path / "append.jsonl"
    shutil.copyfile(sample[0], path)
    rec = {"type": "message", "message": {"role": "user", "content": "x" * 800}}
    with Transcript.open(path) as t:
        first = t.line_count
        line = benchmark(t.append, rec, sync=sync)
        assert line >= first and t.line_count == line + 1
        w = t.window(message_limit=1)
        assert w.messages[0].record["message"]["content"] == "x" * 800


@pytest.mark.parametrize("sync", [False, True], ids=["nosync", "fsync"])
def test_append_1mib_then_reopen(benchmark, sample, tmp_path, sync):
    path = tmp_path / "append.jsonl"
    shutil.copyfile(sample[0], path)
    with Transcript.open(path) as t:
        base = t.message_count
        side = t._layout.sidecar_path
    size, st, side_size = os.path.getsize(path), os.stat(path), os.path.getsize(side)
    rec = {"type": "message", "id": "big-append",
           "message": {"role": "toolResult", "content": [{"type": "text", "text": "y" * MiB}]}}
    line_len = len(encode_record(rec))

    def restore():
        os.truncate(path, size)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.truncate(side, side_size)
        return (Transcript.open(path),), {}

    def append_then_reopen(t):
        t.append(rec, sync=sync)
        t.close()
        with Transcript.open(path) as t2:
            return t2.window(preset="renderer"), t2.layout_outcome

    w, outcome = benchmark.pedantic(append_then_reopen, setup=restore, rounds=10, warmup_rounds=1)
    assert outcome == "valid"
    assert w.message_count == base + 1
    last = w.messages[-1]
    assert last.record["id"] == "big-append" and last.truncated
    assert last.length == line_len
