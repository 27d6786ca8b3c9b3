"""The native tree of a transcript's entries agrees with its slow twin
(``tests/reference/linetree.py``): each line's links on any JSON object, and where
lines hang on any links, built at once or grown a few lines at a time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundctx._native import linetree
from boundctx.transcript.tree import grow, id_hash, link_keys

from tests.reference import linetree as ref

KEYS = link_keys("auto")
NAMES = [k.decode() for k, _slot in KEYS]

ids = st.sampled_from(["a", "b", "c", "ü", "\U0001f600", "x\"y", "\ud800", "long-" + "q" * 60, ""])
values = st.one_of(ids, st.none(), st.integers(), st.booleans(),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.sampled_from(NAMES), ids, max_size=2))
keys = st.one_of(st.sampled_from(NAMES), st.sampled_from(["type", "message", "uuidx", "Id", "parent"]))


@st.composite
def json_lines(draw) -> bytes:
    """A JSON object written by hand, so keys may repeat, with any spacing and escapes."""
    pairs = draw(st.lists(st.tuples(keys, values), max_size=8))
    ascii_ = draw(st.booleans())
    space = draw(st.sampled_from(["", " ", "\t", " \r "]))

    def text(ascii_: bool) -> str:
        body = ("," + space).join(json.dumps(k) + space + ":" + space + json.dumps(v, ensure_ascii=ascii_)
                                  for k, v in pairs)
        return "{" + space + body + space + "}"

    try:
        return text(ascii_).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate can only be written escaped
        return text(True).encode("utf-8")


#: The link walk's paths: AVX2 (where this CPU has it) and the scalar fallback.
PATHS = [pytest.param(True, id="simd", marks=pytest.mark.skipif(not linetree.SIMD_AVAILABLE,
                                                                 reason="no AVX2 here")),
         pytest.param(False, id="scalar")]


def native_links(lines: list[bytes], simd: bool | None = None) -> list[tuple[int, ...]]:
    """The native links of ``lines``, by the walk's default path or the one named."""
    data = b"".join(line + b"\n" for line in lines)
    starts = np.cumsum([0] + [len(x) + 1 for x in lines[:-1]]).astype(np.int64)
    before = linetree.use_simd(linetree.SIMD_AVAILABLE if simd is None else simd)
    try:
        out = linetree.line_links(data, starts, 0, len(lines), len(data), 0, KEYS)
    finally:
        linetree.use_simd(before)
    return [tuple(int(v) for v in row) for row in np.frombuffer(out, dtype=np.uint64).reshape(-1, 4)]


@pytest.mark.parametrize("simd", PATHS)
@settings(max_examples=300, deadline=None)
@given(lines=st.lists(json_lines(), min_size=1, max_size=6))
def test_the_links_of_any_json_object_are_the_twins(simd, lines):
    assert native_links(lines, simd) == [ref.links_of_line(x, KEYS) for x in lines]


# Pieces of lines that the AVX2 walk's masks turn on: quotes, backslash runs, brackets of
# both kinds, link keys, bytes that are no UTF-8, NULs and control characters.
_PIECES = [b'"', b"\\", b"\\", b'\\"', b"\\\\", b"{", b"}", b"[", b"]", b":", b",", b" ", b"a", b"0",
           b'"uuid":', b'"parentUuid":"', b'"id":"x"', b'"message":{', b'"content":[', b"\x00", b"\x1f",
           b"\xff", b"\xc3", b"\xbc", b"n" * 40, b"null", b'"' + b"t" * 70 + b'"']
_HEADS = [b"", b"{", b'{"uuid":"a","message":', b'{"message":{"x":"', b'{"parentUuid":"b","m":[']


@st.composite
def hostile_lines(draw) -> bytes:
    """Any bytes, mostly ones that start a record, long enough to cross 32- and 64-byte
    blocks and to end inside one."""
    head = draw(st.sampled_from(_HEADS))
    body = b"".join(draw(st.lists(st.one_of(st.sampled_from(_PIECES), st.binary(max_size=4)), max_size=60)))
    return (head + body).replace(b"\n", b" ")


@settings(max_examples=1000, deadline=None)
@given(st.lists(hostile_lines(), min_size=1, max_size=4))
def test_the_simd_and_scalar_walks_give_the_same_links_on_any_bytes(lines):
    if not linetree.SIMD_AVAILABLE:
        pytest.skip("no AVX2 here")
    assert native_links(lines, True) == native_links(lines, False)
    for line, links in zip(lines, native_links(lines, True)):
        try:
            json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        assert links == ref.links_of_line(line, KEYS)


@pytest.mark.parametrize("simd", PATHS)
def test_every_offset_of_a_block_pair_is_walked_alike(simd):
    # Each token that changes the walk's state (a quote, an escaped quote after a run of
    # backslashes of either parity, a bracket, a string that closes in the next block or
    # the one after) at each of the 128 offsets of two 64-byte blocks of a nested value,
    # with the line's end at every distance after it.
    own = id_hash("a") % (1 << 64)
    tokens = [b'"q"', b'"\\""', b'"\\\\"', b'"\\\\\\""', b'"' + b"\\" * 34 + b'"', b"{}", b"[[]]",
              b'"' + b"y" * 70 + b'"', b'"x\\"' + b"z" * 60 + b'"']
    for off in range(130):
        for tok in tokens:
            for tail in (b"", b" " * 5, b",0" * 40):
                line = b'{"message":{"t":[' + b"1," * (off // 2) + b" " * (off % 2) + tok + tail \
                    + b'],"k":0},"uuid":"a"}'
                want = ref.links_of_line(line, KEYS)
                assert want == (own, 0, 0, 0), line
                assert native_links([line], simd) == [want], line
                cut = line[: len(line) - 20]  # ends inside the nested value
                assert native_links([cut], simd) == native_links([cut], False) == [(0, 0, 0, 0)], cut


def test_an_escaped_id_links_as_its_decoded_text():
    plain = b'{"uuid":"\xc3\xbc-\xf0\x9f\x98\x80","parentUuid":null}'
    escaped = b'{"uuid":"\\u00fc-\\ud83d\\ude00","parentUuid":null}'
    assert native_links([plain]) == native_links([escaped])
    assert native_links([plain])[0][0] == id_hash("ü-😀") % (1 << 64)


@pytest.mark.parametrize("simd", PATHS)
@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.binary(max_size=60), min_size=1, max_size=6))
def test_any_bytes_give_links_without_crashing_and_json_ones_agree(simd, lines):
    lines = [x.replace(b"\n", b" ") for x in lines]
    got = native_links(lines, simd)
    for line, links in zip(lines, got):
        try:
            json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue  # not JSON: the native skipper may still read it; shown corrupt anyway
        assert links == ref.links_of_line(line, KEYS)


def test_a_line_that_is_not_one_object_has_no_links():
    for line in (b'[{"uuid":"a"}]', b'{"uuid":"a"} {"x":1}', b'{"uuid":"a"', b'{"uuid":"a",}', b'"uuid"'):
        assert native_links([line]) == [(0, 0, 0, 0)], line


def test_only_a_plain_key_of_a_link_keys_exact_name_fills_its_slot():
    # Keys are matched in place: by length first ("type" is as long as "uuid"), then by
    # bytes. A key written with an escape never matches (it is read past), one longer
    # than any name neither, and a raw control character in a key makes the line no object.
    own = id_hash("a") % (1 << 64)
    assert native_links([b'{"type":"x","uuid":"a","uuix":"b","uui":"c"}']) == [(own, 0, 0, 0)]
    assert native_links([b'{"\\u0075uid":"a"}', b'{"uuid":"a","\\"":"b"}']) == [(0, 0, 0, 0), (own, 0, 0, 0)]
    assert native_links([b'{"uuid":"a","' + b"p" * 100 + b'":"b"}']) == [(own, 0, 0, 0)]
    assert native_links([b'{"uuid":"a","u\x01":"b"}', b'{"uuid":"a","u\\']) == [(0, 0, 0, 0)] * 2


# -- where lines hang ----------------------------------------------------------------------

POOL = 12


@st.composite
def link_rows(draw):
    """Random links over a small id pool: copies, dangling parents, nulls, fan-outs."""
    n = draw(st.integers(1, 40))
    rows, kinds = [], []
    for i in range(n):
        own = draw(st.sampled_from([0, 0] + [id_hash(f"e{k}") % (1 << 64) for k in range(POOL)]))
        parent = draw(st.sampled_from([0, 1, 1] + [id_hash(f"e{k}") % (1 << 64) for k in range(POOL)]))
        logical = draw(st.sampled_from([0, 0, 1, id_hash("e0") % (1 << 64), id_hash("e5") % (1 << 64)]))
        source = parent if draw(st.booleans()) else draw(st.sampled_from([0, id_hash("e1") % (1 << 64)]))
        rows.append((own, parent, logical, source))
        kinds.append(draw(st.sampled_from([1, 1, 2, 3, 3, 4])))
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=4))))
    return rows, kinds, cuts


def grow_in_pieces(rows, kinds, cuts):
    """The native tree of ``rows``, grown piece by piece as appends grow a layout."""
    table = linetree.IdTable()
    arrays = {k: np.empty(0, dtype=np.int64) for k in ("ids", "up", "pos", "tip", "comp")}
    as_list = True
    messages = 0
    last_comp = -1
    bounds = [0, *cuts, len(rows)]
    for lo, hi in zip(bounds, bounds[1:]):
        if lo == hi:
            continue
        links = np.array(rows[lo:hi], dtype=np.uint64).tobytes()
        up = arrays["up"]
        kept = np.flatnonzero(up != linetree.COPY)

        def refs(lines, arrays=arrays):
            idx = np.frombuffer(lines, dtype=np.int64)
            return tuple(arrays[k][idx].tobytes() for k in ("pos", "tip", "comp"))

        tree = grow(links, bytes(kinds[lo:hi]), lo, table, up_before=up[max(0, lo - linetree.FANOUT_SPAN):].tobytes(),
                    last_kept=int(kept[-1]) if len(kept) else -1, refs=refs, messages_before=messages,
                    compaction_before=last_comp)
        for key, data in zip(("ids", "up", "pos", "tip", "comp"), tree[:5]):
            arrays[key] = np.concatenate([arrays[key], np.frombuffer(data, dtype=np.int64)])
        as_list = as_list and tree.reads_as_list
        messages += sum(1 for k in kinds[lo:hi] if ref.in_sequence(k))
        comps = [lo + j for j, k in enumerate(kinds[lo:hi]) if k == ref.COMPACTION]
        last_comp = comps[-1] if comps else last_comp
    return arrays, as_list


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(link_rows())
def test_where_lines_hang_is_the_twins_grown_at_once_or_in_pieces(case):
    rows, kinds, cuts = case
    up = ref.hang(rows)
    pos, tip, comp = ref.place(up, kinds)
    for pieces in ([], cuts):
        arrays, as_list = grow_in_pieces(rows, kinds, pieces)
        assert arrays["up"].tolist() == up
        assert arrays["pos"].tolist() == pos
        assert arrays["tip"].tolist() == tip
        assert arrays["comp"].tolist() == comp
        assert as_list == ref.reads_as_list(kinds, pos, comp, up)


def test_a_parallel_calls_result_stays_on_the_branch():
    """Claude Code's fan-out: call A, its progress, call B below it, then A's result
    written as A's child and B's result as B's: both results stay on the branch."""
    h = {k: id_hash(k) % (1 << 64) for k in ("A", "p1", "B", "rA", "rB", "next")}
    rows = [(h["A"], 1, 0, 0), (h["p1"], h["A"], 0, 0), (h["B"], h["p1"], 0, 0),
            (h["rA"], h["A"], 0, h["A"]), (h["rB"], h["B"], 0, h["B"]), (h["next"], h["rB"], 0, 0)]
    kinds = [1, 3, 1, 1, 1, 1]
    arrays, as_list = grow_in_pieces(rows, kinds, [])
    assert arrays["up"].tolist() == [-1, 0, 1, 2, 3, 4]
    assert as_list
    # Without the rule, A's result would be a dead end beside the branch.
    rows[3] = (h["rA"], h["A"], 0, 0)
    arrays, as_list = grow_in_pieces(rows, kinds, [])
    assert arrays["up"].tolist()[3] == 0 and not as_list


def test_the_walk_up_a_branch_stops_short_where_its_arrays_end():
    up = np.array([-1, 0, 1, 2, 3], dtype=np.int64)
    tip = np.arange(5, dtype=np.int64)
    out, short = linetree.branch_lines(tip, up, 0, 4, 10)
    assert np.frombuffer(out, dtype=np.int64).tolist() == [4, 3, 2, 1, 0] and not short
    out, short = linetree.branch_lines(tip[2:], up[2:], 2, 4, 10)
    assert np.frombuffer(out, dtype=np.int64).tolist() == [4, 3, 2] and short
    out, short = linetree.branch_lines(tip, up, 0, 4, 2)
    assert np.frombuffer(out, dtype=np.int64).tolist() == [4, 3] and not short


def test_native_inputs_out_of_range_are_refused_not_read():
    with pytest.raises(ValueError):
        linetree.line_links(b"{}\n", np.array([0], dtype=np.int64), 0, 1, 99, 0, KEYS)
    with pytest.raises(ValueError):
        linetree.line_links(b"{}\n", np.array([0], dtype=np.int64), 1, 1, 3, 0, KEYS)
    with pytest.raises(ValueError):
        linetree.place_lines(np.array([5], dtype=np.int64), b"\x01", 0, np.empty(0, dtype=np.int64),
                             np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    with pytest.raises(ValueError):
        linetree.line_links(b"{}\n", np.array([0], dtype=np.int64), 0, 1, 3, 0, [(b"k" * 99, 0)])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5000), st.integers(0, 3), st.integers(0, 1000))
def test_id_index_sorts_any_ids_stably_with_their_lines(ids, repeat, line0):
    # Thousands of ids over all of int64 (every radix digit in play), some repeated
    # (only a lying array repeats one): sorted as int64, equal ids in line order.
    ids = [k for k in ids for _ in range(1 + (repeat if k % 7 == 0 else 0))]
    up = [linetree.COPY if k % 11 == 0 else 0 for k in ids]
    keys, lines = linetree.id_index(np.array(ids, dtype=np.int64), np.array(up, dtype=np.int64), line0)
    want = sorted(((k, line0 + i) for i, (k, u) in enumerate(zip(ids, up)) if k != 0 and u != linetree.COPY),
                  key=lambda kl: kl[0])
    got = zip(np.frombuffer(keys, dtype=np.int64).tolist(), np.frombuffer(lines, dtype=np.int64).tolist())
    assert list(got) == want


@settings(max_examples=200, deadline=None)
@given(link_rows())
def test_a_tree_hangs_as_a_chain_as_the_twin_says(case):
    # hang_lines of random links (copies, forks, roots), and the same lines as a plain
    # chain, whole and from a later first line.
    rows, _kinds, cuts = case
    up = ref.hang(rows)
    assert linetree.hangs_as_chain(np.array(up, dtype=np.int64), 0) == ref.hangs_as_chain(up)
    line0 = cuts[0] if cuts else 0
    chain = [line0 + k - 1 for k in range(len(rows))]
    assert linetree.hangs_as_chain(np.array(chain, dtype=np.int64), line0)
    if rows:
        chain[-1] = linetree.COPY
        assert not linetree.hangs_as_chain(np.array(chain, dtype=np.int64), line0)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**30), 2**30 - 1), st.integers(1, 300)), min_size=1, max_size=12),
       st.integers(0, 2**32), st.randoms(use_true_random=False))
def test_id_index_sorts_ids_that_share_their_top_bits(runs, low_span, rnd):
    # id_index sorts by the top 31 bits first, then finishes each run of ids whose top
    # bits are equal: short runs one way, long ones (past 64) another. Runs of up to 300
    # ids share their top bits here, their low bits drawn from a span that makes
    # repeats likely or rare; lines come shuffled.
    ids = [(top << 33) | rnd.randrange(low_span + 1) for top, length in runs for _ in range(length)]
    rnd.shuffle(ids)
    up = [0] * len(ids)
    keys, lines = linetree.id_index(np.array(ids, dtype=np.int64), np.array(up, dtype=np.int64), 0)
    want = sorted(((k, i) for i, k in enumerate(ids) if k != 0), key=lambda kl: kl[0])
    got = zip(np.frombuffer(keys, dtype=np.int64).tolist(), np.frombuffer(lines, dtype=np.int64).tolist())
    assert list(got) == want


@pytest.mark.parametrize("expected", [0, 1, 3000])
def test_an_id_table_grown_past_its_room_keeps_every_first_line(expected):
    table = linetree.IdTable(expected)
    hashes = [id_hash(f"e{k}") % (1 << 64) for k in range(5000)]
    table.add_ids(np.array(hashes[:2000], dtype=np.uint64), 0)
    rows = np.array([(h, 0, 0, 0) for h in hashes[1500:]], dtype=np.uint64).reshape(-1)
    _ids, up = linetree.hang_lines(rows, table, 2000, np.empty(0, dtype=np.int64), 1999)
    assert len(table) == 5000
    # hashes[k] is on line k when add_ids put it, else on line 2000 + (k - 1500).
    assert [table.lookup(h) for h in hashes] == list(range(2000)) + list(range(2500, 5500))
    assert np.frombuffer(up, dtype=np.int64)[:500].tolist() == [linetree.COPY] * 500  # ids lines 0.. had


def test_an_id_table_refuses_a_negative_size():
    with pytest.raises(ValueError, match="expected"):
        linetree.IdTable(-1)
