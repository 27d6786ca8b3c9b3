"""Fuzzing the native core: every entry point against its twin.

- Arbitrary bytes through ``targets.py`` (one target per entry point, the same ones the
  atheris harness runs), under Hypothesis.
- Structured Hypothesis tests for the entry points ``tests/native/`` has no twin test
  for: ``newline_sync``, ``DialectTable`` on arbitrary tables, ``next_cut`` on hostile
  spans, ``is_boundary`` outside the text.
- A short coverage-guided run with atheris, in a subprocess, where atheris imports.

``HYPOTHESIS_PROFILE=fuzz`` runs the Hypothesis side longer; ``atheris_native.py``
documents the long coverage-guided run.
"""

import ast
import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundctx._native import lineindex, sections

from . import targets, twins
from tests._support import importable_env
from tests._support.strategies import hard_texts, jsonl_documents
from tests.reference import graphemes
from tests.reference import lineindex as ref_lineindex
from tests.reference import tokenmap as ref_tokenmap

ROOT = pathlib.Path(__file__).resolve().parents[2]
STUBS = ROOT / "pyshell" / "boundctx" / "_native"


def stub_entry_points() -> set[str]:
    """``module.name`` of every public function and class the stubs declare."""
    names = set()
    for stub in STUBS.glob("*.pyi"):
        for node in ast.parse(stub.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                names.add(f"{stub.stem}.{node.name}")
    return names


def test_every_native_entry_point_has_a_fuzz_target():
    covered = set(targets.TARGETS) | set(targets.CHECKED_THROUGH)
    missing = stub_entry_points() - covered
    assert not missing, (f"native entry points with no fuzz target: {sorted(missing)}; add one to "
                         "tests/fuzz/targets.py (TARGETS) so both fuzzers cover it")
    stale = covered - stub_entry_points()
    assert not stale, f"fuzz targets for entry points the stubs no longer declare: {sorted(stale)}"


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
@given(data=st.binary(max_size=1500))
def test_native_agrees_with_its_twin_on_arbitrary_bytes(target, data):
    targets.run(data, target)


# -- structured tests for entry points without a twin test in tests/native --------------


@st.composite
def texts_and_token_starts(draw):
    text = draw(hard_texts(40, surrogates=True))
    total = ref_tokenmap.utf8_length(text)
    cuts = sorted(draw(st.lists(st.integers(0, total), max_size=30)))
    edges = [0, *cuts, total]
    starts, _ = ref_tokenmap.token_spans(text, [b - a for a, b in zip(edges, edges[1:])])
    lo = draw(st.integers(0, len(text)))
    return text, starts, lo, draw(st.integers(lo, len(text)))


@given(texts_and_token_starts())
def test_newline_sync_matches_its_twin(case):
    text, starts, lo, hi = case
    got = sections.newline_sync(text, np.asarray(starts, np.int64), lo, hi)
    assert got == twins.newline_sync(text, starts, lo, hi)
    first, last, _ = got
    if first >= 0:  # what the count shortcut relies on: sync points are token starts or ends
        assert lo <= first <= last <= hi


@given(st.text(max_size=20), st.integers(-3, 25), st.integers(-3, 25))
def test_newline_sync_refuses_a_range_outside_the_text_like_its_twin(text, lo, hi):
    ok = 0 <= lo <= hi <= len(text)
    try:
        sections.newline_sync(text, np.zeros(0, np.int64), lo, hi)
    except ValueError:
        assert not ok
    else:
        assert ok


table_names = st.one_of(st.text(max_size=70), st.text("abcdefgh_", min_size=1, max_size=64),
                        st.binary(max_size=4), st.integers(), st.none())
table_kinds = st.one_of(st.sampled_from([1, 2, 3]), st.integers(-2, 6), st.booleans(),
                        st.floats(allow_nan=False), st.text(max_size=2), st.none())


@given(st.dictionaries(table_names, table_kinds, max_size=34), jsonl_documents())
def test_dialect_tables_are_accepted_exactly_when_valid_and_then_classify_like_the_twin(kinds, doc):
    try:
        table = lineindex.DialectTable(kinds)
    except (ValueError, TypeError):
        assert not twins.dialect_table_accepts(kinds)
        return
    assert twins.dialect_table_accepts(kinds)
    doc = b"".join(b'{"type":"' + k.encode() + b'"}\n' for k in kinds) + doc
    got = lineindex.scan_bytes(doc, table)
    want = ref_lineindex.scan_bytes(doc, kinds)
    assert (list(got.kinds), got.indexed_end) == (want.kinds, want.indexed_end)


int64s = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 70))


@given(hard_texts(30, surrogates=True).filter(bool), st.lists(int64s, max_size=8), st.lists(int64s, max_size=9),
       st.integers(-2, 70), st.integers(-1, 40), st.integers(-1, 30), st.integers(-3, 70))
def test_next_cut_refuses_hostile_spans_or_answers_inside_the_text(text, s, e, start, max_tokens, overlap, floor):
    try:
        end, nxt, kind = sections.next_cut(text, np.asarray(s, np.int64), np.asarray(e, np.int64),
                                           start, max_tokens, overlap, floor)
    except ValueError:
        return
    assert kind in range(5) and -1 <= nxt <= len(text)
    assert end == -1 or start < end <= len(text)


@given(hard_texts(20, surrogates=True), st.integers(-5, 30), st.integers(0, 30))
def test_is_boundary_anywhere_matches_the_twin(text, i, floor):
    floor = min(floor, len(text))
    assert sections.is_boundary(text, i, floor) == graphemes.is_boundary(text, i, floor)


# -- the coverage-guided harness -------------------------------------------------------

needs_atheris = pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None,
    reason="atheris is not installed (pip install atheris: wheels for x86-64 Linux, CPython 3.10-3.14)")


def run_atheris(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tests.fuzz.atheris_native", *map(str, args)], cwd=cwd,
                          env=importable_env(), capture_output=True, text=True, timeout=300)


@needs_atheris
def test_a_short_coverage_guided_run_finds_nothing(tmp_path):
    out = run_atheris("-atheris_runs=4000", "-max_len=1024", f"-artifact_prefix={tmp_path}/", cwd=tmp_path)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "Done 4000 " in out.stderr
    assert not list(tmp_path.glob("crash-*"))


@needs_atheris
def test_a_finding_fails_the_coverage_guided_run_and_its_input_replays(tmp_path):
    out = run_atheris("--plant", "-atheris_runs=1000", f"-artifact_prefix={tmp_path}/", cwd=tmp_path)
    assert out.returncode != 0 and "planted finding" in out.stdout + out.stderr
    (crash,) = tmp_path.glob("crash-*")
    assert run_atheris(crash, cwd=tmp_path).returncode == 0  # the same input, no plant: clean
