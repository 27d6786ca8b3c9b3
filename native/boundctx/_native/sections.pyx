"""Find where each section of a text ends: the cut rule of the section planner.

The planner (``boundctx.sections``) tokenizes the whole text once and maps every token
to a code-point span (``tokenmap.token_spans``). For a section starting at ``start``,
:func:`next_cut` reads off where ``max_tokens`` whole-text tokens end, then looks for
the cut inside a bounded window before that point: the last newline, else the last
whitespace, else the last grapheme-cluster boundary, else (a single cluster wider than
the window) the estimate itself. It also places the next section's start ``overlap``
code points before the cut, moved back only to keep a cluster whole.

Work per section is bounded by the section's own length, so planning is linear in the
text however it is shaped (30K-character lines without spaces, ``=`` runs, CJK runs).

Grapheme clusters follow Unicode's extended rule (UAX #29) with two conservative
simplifications, shared with the twin ``tests/reference/graphemes.py``; properties come
from ``grapheme_table.h``, generated from the ``regex`` module's Unicode data.
"""

from libc.stdint cimport int64_t, uint8_t, uint32_t

from boundctx._native.strview cimport Text, text_at, text_view


cdef extern from "boundctx/_native/grapheme_table.h":
    const int BCTX_GB_RUNS
    const uint32_t BCTX_GB_STARTS[]
    const uint8_t BCTX_GB_VALUES[]


# Classes (low 4 bits) and flags, as in tests/reference/graphemes.py.
cdef enum:
    OTHER = 0
    CR = 1
    LF = 2
    CONTROL = 3
    EXTEND = 4
    ZWJ = 5
    RI = 6
    PREPEND = 7
    SPACINGMARK = 8
    HL = 9
    HV = 10
    HT = 11
    HLV = 12
    HLVT = 13
    EXTPICT = 0x10
    INCB_LINKER = 0x20
    INCB_CONSONANT = 0x40
    INCB_EXTEND = 0x80
    SNAP_LIMIT = 64

#: How far a next section's start may move back to a cluster boundary (code points).
MAX_SNAP = SNAP_LIMIT

cdef enum:
    # How next_cut chose its cut (the `kind` it returns), most preferred first.
    CUT_END = 0            # the end of the text (or no cut at all: end is -1)
    CUT_NEWLINE = 1        # right after a newline
    CUT_SPACE = 2          # right after whitespace
    CUT_BOUNDARY = 3       # at a cluster boundary
    CUT_IN_CLUSTER = 4     # inside a cluster wider than the window (pathological text)


cdef uint8_t _value(Py_UCS4 c) noexcept nogil:
    # Binary search for the run holding c: the last run whose start is <= c.
    # Invariant: BCTX_GB_STARTS[lo] <= c < BCTX_GB_STARTS[hi] (hi may be one past).
    cdef int lo = 0, hi = BCTX_GB_RUNS, mid
    if c < 0x20:
        return CR if c == 13 else (LF if c == 10 else CONTROL)
    if c < 0x7F:
        return OTHER  # printable ASCII: no property, no flag
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if BCTX_GB_STARTS[mid] <= c:
            lo = mid
        else:
            hi = mid
    return BCTX_GB_VALUES[lo]


cdef inline bint _is_space(Py_UCS4 c) noexcept nogil:
    # Exactly str.isspace(): Unicode White_Space minus nothing, plus the ASCII
    # information separators 0x1C-0x1F that Python also counts.
    if c < 0x80:
        return c == 32 or 9 <= c <= 13 or 0x1C <= c <= 0x1F
    return (c == 0x85 or c == 0xA0 or c == 0x1680 or 0x2000 <= c <= 0x200A
            or c == 0x2028 or c == 0x2029 or c == 0x202F or c == 0x205F or c == 0x3000)


cdef bint _boundary(const Text *t, Py_ssize_t i, Py_ssize_t floor) noexcept nogil:
    """Whether a cut before code point i lies between two clusters; look-backs stop at
    floor, a known boundary."""
    cdef uint8_t va, vb, a, b, v
    cdef Py_ssize_t j, run
    if i <= 0 or i >= t.n:
        return True
    va = _value(text_at(t, i - 1))
    vb = _value(text_at(t, i))
    a = va & 0xF
    b = vb & 0xF
    if a == CR and b == LF:
        return False
    if a == CONTROL or a == CR or a == LF or b == CONTROL or b == CR or b == LF:
        return True
    if a == HL and (b == HL or b == HV or b == HLV or b == HLVT):
        return False
    if (a == HLV or a == HV) and (b == HV or b == HT):
        return False
    if (a == HLVT or a == HT) and b == HT:
        return False
    if b == EXTEND or b == ZWJ or b == SPACINGMARK or a == PREPEND:
        return False
    if vb & INCB_CONSONANT:
        # Invariant: text[j+1:i] are all InCB Linker/Extend and none is a Linker.
        j = i - 1
        while j >= floor:
            v = _value(text_at(t, j))
            if not (v & (INCB_LINKER | INCB_EXTEND)):
                break
            if v & INCB_LINKER:
                return False
            j -= 1
    if a == ZWJ and (vb & EXTPICT):
        return False
    if a == RI and b == RI:
        # Flags pair up from the start of the run (or from floor, a boundary).
        # Invariant: run == the number of RI code points in text[j+1:i].
        run = 0
        j = i - 1
        while j >= floor and (_value(text_at(t, j)) & 0xF) == RI:
            run += 1
            j -= 1
        return run % 2 == 0
    return True


cdef Py_ssize_t _last_cut(const Text *t, Py_ssize_t lo, Py_ssize_t e, int kind,
                          Py_ssize_t floor) noexcept nogil:
    """The last cut c in [lo, e] of ``kind`` (CUT_NEWLINE: right after a newline,
    CUT_SPACE: right after whitespace, CUT_BOUNDARY: anywhere) that keeps every cluster
    whole, or -1 when there is none. Needs 1 <= lo and e < t.n."""
    cdef Py_ssize_t c = e
    # Invariant: no cut in (c, e] is of this kind. The cheap character test comes
    # before the boundary test, which may look back over a run of marks or flags.
    while c >= lo:
        if kind == CUT_NEWLINE:
            if text_at(t, c - 1) == 10 and _boundary(t, c, floor):
                return c
        elif kind == CUT_SPACE:
            if _is_space(text_at(t, c - 1)) and _boundary(t, c, floor):
                return c
        elif _boundary(t, c, floor):
            return c
        c -= 1
    return -1


cdef Py_ssize_t _bisect_right(const int64_t[::1] a, int64_t x) noexcept nogil:
    # First index whose value is > x (a is non-decreasing).
    cdef Py_ssize_t lo = 0, hi = a.shape[0], mid
    # Invariant: a[:lo] <= x < a[hi:]. On an array that is not sorted (a hostile
    # TokenCounter) it still ends, at some index in [0, len(a)]: callers check that.
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef Py_ssize_t _bisect_left(const int64_t[::1] a, int64_t x) noexcept nogil:
    # First index whose value is >= x (a is non-decreasing).
    cdef Py_ssize_t lo = 0, hi = a.shape[0], mid
    # Invariant: a[:lo] < x <= a[hi:] (ends in [0, len(a)] on any array, as above).
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def next_cut(str text not None, const int64_t[::1] tok_start not None,
             const int64_t[::1] tok_end not None, Py_ssize_t start,
             Py_ssize_t max_tokens, Py_ssize_t overlap, Py_ssize_t floor=-1):
    """Where the section starting at ``start`` ends, and where the next one starts.

    Parameters
    ----------
    text : str
    tok_start, tok_end : int64 buffers
        Code-point span of each token of the whole text (``tokenmap.token_spans``).
    start : int
        The section's first code point (a cluster boundary, or 0).
    max_tokens : int
        Whole-text tokens the section may overlap (>= 1).
    overlap : int
        Code points the next section repeats (>= 0).
    floor : int, optional
        A cluster boundary at or before ``start`` where look-backs (flag pairs, virama
        runs) stop; default ``start``. Pass an earlier one when ``start`` itself could
        not be moved to a boundary.

    Returns
    -------
    (end, next_start, kind) : tuple of int
        ``text[start:end]`` is the section; ``kind`` says how the cut was chosen: 0 end of
        text, 1 newline, 2 whitespace, 3 cluster boundary, 4 inside a cluster wider than
        the window's half (pathological text only). ``end`` is -1 when the budget holds
        no cut longer than the overlap, or none that keeps a cluster whole past it (the
        budget is too small); ``next_start`` is -1 after the last section.

    Raises
    ------
    ValueError
        When an argument is out of range, or the token spans do not end at the end of
        the text or are not non-decreasing where the estimate reads them.
    """
    cdef Text t = text_view(text)
    cdef Py_ssize_t ntok = tok_end.shape[0], i0, k, e, lo, p, c, ns, kind, snap
    if tok_start.shape[0] != ntok:
        raise ValueError("tok_start and tok_end must have one entry per token")
    if not 0 <= start < t.n:
        raise ValueError(f"start must be in [0, {t.n}), got {start}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if overlap < 0:
        raise ValueError(f"overlap must be >= 0, got {overlap}")
    if ntok and tok_end[ntok - 1] != t.n:
        raise ValueError("the token spans do not end at the end of the text")
    if floor < 0:
        floor = start
    if floor > start:
        raise ValueError(f"floor must be <= start ({start}), got {floor}")
    # Clamp what can only mean "everything" so no sum below can overflow.
    if overlap > t.n:
        overlap = t.n
    if max_tokens > ntok + 1:
        max_tokens = ntok + 1
    with nogil:
        # The estimate: the end of the max_tokens-th token overlapping [start, ...),
        # stepped back past tokens that share a character with the next token.
        i0 = _bisect_right(tok_end, start)
        k = i0 + max_tokens - 1
        if k >= ntok - 1:
            e = t.n
        else:
            # Invariant: for every k' in (k, k0] (k0: k on entry), token k' + 1 starts
            # before token k' ends: they share a character, which a cut at
            # tok_end[k'] would split.
            while k > i0 and tok_start[k + 1] < tok_end[k]:
                k -= 1
            e = tok_end[k]
    # The spans are trusted only this far: with tok_end non-decreasing (as token_spans
    # writes it), tok_end[k] >= tok_end[i0] > start. A hostile array could put any
    # int64 here, and e - start below would wrap; refuse it instead.
    if e <= start:
        raise ValueError(
            f"the token spans are not non-decreasing: token {k} ends at {e}, "
            f"at or before the section's start {start}")
    with nogil:
        kind = CUT_END
        c = -1
        if e >= t.n:
            c = t.n
        else:
            # The window: the second half of the estimate, and always past the overlap
            # so the next section starts after this one.
            lo = start + overlap + 1
            if lo < start + (e - start) // 2:
                lo = start + (e - start) // 2
            if lo <= e:
                # The last newline in the window, else the last whitespace, else the
                # last cluster boundary: the first kind that has a cut decides.
                c = _last_cut(&t, lo, e, CUT_NEWLINE, floor)
                if c >= 0:
                    kind = CUT_NEWLINE
                if c < 0:
                    c = _last_cut(&t, lo, e, CUT_SPACE, floor)
                    if c >= 0:
                        kind = CUT_SPACE
                if c < 0:
                    c = _last_cut(&t, lo, e, CUT_BOUNDARY, floor)
                    if c >= 0:
                        kind = CUT_BOUNDARY
                if c < 0:
                    # No boundary past the overlap. If one lies in the window's usual
                    # half before it, the overlap is what left no room: the budget is
                    # too small (end stays -1). Otherwise one cluster covers the whole
                    # half-window (pathological text): cut inside it.
                    p = lo - 1
                    # Invariant: no cluster boundary in (p, lo - 1].
                    while p > start and p >= start + (e - start) // 2:
                        if _boundary(&t, p, floor):
                            break
                        p -= 1
                    if not (p > start and p >= start + (e - start) // 2):
                        c = e
                        kind = CUT_IN_CLUSTER
        ns = -1
        if 0 <= c < t.n:
            # Next start: overlap before the cut, moved back (a little) to a boundary.
            ns = c - overlap
            snap = 0
            # Invariant: no cluster boundary in (ns - snap, ns]; at most SNAP_LIMIT
            # steps, so a text with no boundaries costs O(1) here.
            while snap < SNAP_LIMIT and ns - snap > start and not _boundary(&t, ns - snap, floor):
                snap += 1
            if snap < SNAP_LIMIT and ns - snap > start:
                ns -= snap
    return c, ns, kind


cdef inline bint _sync(const Text *t, Py_ssize_t i, bint after_text, bint at_spaces) noexcept nogil:
    # A newline followed by a character that is not whitespace (in str.isspace's
    # sense, a superset of regex \s), or either end of the text; with after_text, the
    # newline must also follow a character that is not whitespace. With at_spaces, also
    # the position of a single space between two characters that are not whitespace.
    if i <= 0 or i >= t.n:
        return True
    if at_spaces and text_at(t, i) == 32 and i + 1 < t.n and not _is_space(text_at(t, i - 1)) \
            and not _is_space(text_at(t, i + 1)):
        return True
    if after_text and i >= 2 and _is_space(text_at(t, i - 2)):
        return False
    return text_at(t, i - 1) == 10 and not _is_space(text_at(t, i))


def newline_sync(str text not None, const int64_t[::1] tok_start not None, Py_ssize_t start,
                 Py_ssize_t end, bint after_text=False, bint at_spaces=False):
    """The first and last newline sync points in ``[start, end]``, and the whole-text
    tokens between them.

    A sync point is a position right after ``\n`` whose next character is not
    whitespace (or an end of the text); with ``after_text``, the ``\n`` must also
    follow a character that is not whitespace; with ``at_spaces``, the position of a
    single space between two non-whitespace characters is one too (before the space).
    For counters that declare ``newline_sync``,
    ``count(text[a:b]) == count(text[a:i]) + count(text[i:b])`` at every sync point
    ``i``, so a section's count is its head and tail re-counted plus the whole text's
    tokens in between.

    Returns
    -------
    (first, last, tokens_between) : tuple of int
        ``(-1, -1, 0)`` when there is none.
    """
    cdef Text t = text_view(text)
    cdef Py_ssize_t u1 = -1, u2 = -1, i
    if not 0 <= start <= end <= t.n:
        raise ValueError(f"need 0 <= start <= end <= {t.n}, got {start}, {end}")
    with nogil:
        # Invariant: no sync point in [start, i).
        i = start
        while i <= end:
            if _sync(&t, i, after_text, at_spaces):
                u1 = i
                break
            i += 1
        if u1 >= 0:
            # Invariant: no sync point in (i, end].
            i = end
            while i >= u1:
                if _sync(&t, i, after_text, at_spaces):
                    u2 = i
                    break
                i -= 1
    if u1 < 0:
        return -1, -1, 0
    # Sync points are token boundaries of the whole text: the tokens between them are
    # those starting in [u1, u2).
    return u1, u2, _bisect_left(tok_start, u2) - _bisect_left(tok_start, u1)


def is_boundary(str text not None, Py_ssize_t i, Py_ssize_t floor=0):
    """Whether cutting ``text`` before code point ``i`` keeps every cluster whole
    (look-backs stop at ``floor``, a known boundary)."""
    cdef Text t = text_view(text)
    if not 0 <= floor <= t.n:
        raise ValueError(f"floor must be in [0, {t.n}], got {floor}")
    return bool(_boundary(&t, i, floor))


def grapheme_value(Py_UCS4 c):
    """The table value of one code point (class | flags), for tests."""
    return _value(c)


def is_space(Py_UCS4 c):
    """Whether the cut rule treats ``c`` as whitespace (the same set as str.isspace)."""
    return bool(_is_space(c))
