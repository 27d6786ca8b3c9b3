"""Frame JSONL into line offsets and classify each line: the index a transcript is read by.

Everything here works on raw bytes and never decodes JSON into Python objects: framing
a 1 GB transcript must cost about what ``wc -l`` costs. A line's kind is decided from
its first ``classify_window`` bytes and its last significant byte, both carried across
reads, so the result never depends on where a read or a part of the scan begins.

Reading a file (``scan_fd``: pread, reader threads, a scan in parts) lives in
``filescan``, which drives the block scanner declared in ``lineindex.pxd``; this module
starts no threads. The display projection of one line lives in ``projection``; the JSON
lexing both walk with is ``jsonlex.pxd``.

The slow, obviously-correct twin of this module is ``tests/reference/lineindex.py``;
property tests assert the two agree on arbitrary bytes.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcpy, memset

from boundctx._native._build cimport BOUNDCTX_CHECKS
from boundctx._native.jsonlex cimport MALFORMED, RAN_OUT, is_ws, read_string, skip_value, skip_ws

#: True when built with -DBOUNDCTX_CYTHON_CHECKS=ON (bounds and wraparound checks on).
BUILT_WITH_CHECKS = bool(BOUNDCTX_CHECKS)

cdef extern from "boundctx/_native/linewalk_simd.h":
    int bx_use_plain_simd(int on) noexcept nogil
    int bx_cpu_has_avx2() noexcept nogil

# The classifier passes over the strings before a line's kind (a Claude Code line's
# message can come before its type) 32 bytes at a time where the CPU has AVX2: chosen
# once, here; use_simd() turns it off (and on again) so tests hold both paths equal.
bx_use_plain_simd(1)

#: Whether this build and CPU have the AVX2 string skip (use_simd can only turn it on then).
SIMD_AVAILABLE = bool(bx_cpu_has_avx2())


def use_simd(bint on):
    """Pass over the plain bytes of a string 32 at a time with AVX2 (where the CPU has it)
    or one at a time; returns whether the AVX2 path was taken before. For tests and
    measurements: both classify every line alike. Not to be called while a scan runs."""
    return bool(bx_use_plain_simd(on))

MESSAGE = KIND_MESSAGE
COMPACTION = KIND_COMPACTION
OTHER = KIND_OTHER
CORRUPT = KIND_CORRUPT
BLANK = KIND_BLANK
UNDECIDED = KIND_UNDECIDED

DEFAULT_CLASSIFY_WINDOW = 1 << 20

cdef enum:
    NAME_CAP = 64     # longest decoded "type" value (or qualifier key/value) a dialect may name


# -- the classifier -----------------------------------------------------------------
#
# Everything below up to the framing reads one line's first bytes through the lexer in
# jsonlex.pxd. The byte helpers return an index >= 0, or a negative status: RAN_OUT
# (the window ended: a longer window could decide) or MALFORMED (not JSON). li_classify
# turns those into line kinds: MALFORMED is CORRUPT; RAN_OUT is UNDECIDED, or CORRUPT
# when the window held the whole line.

cdef enum:
    # What li_classify knows of a qualifier path (its qlen slot; >= 0 is the length of
    # the string found there, NAME_CAP + 1 when that string can match no value).
    Q_UNSEEN = -1     # the path's top-level key has not been met yet
    Q_NONE = -2       # met, and it holds no string: matches no value
    SETTLED = -3      # _read_inner: the value is known, and the caller decides now


cdef Py_ssize_t _after_member(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                              bint *closed) noexcept nogil:
    """After an object member's value ending at p[i]: the index of the next key's quote
    (``*closed`` false; ``n`` when the bytes end first), the index after the object's
    ``}`` (``*closed`` true), RAN_OUT or MALFORMED."""
    # Only "," (then a key) or "}" may follow a member; anything else, "]" included,
    # is MALFORMED.
    i = skip_ws(p, n, i)
    if i >= n:
        return RAN_OUT
    if p[i] == 44:  # ','
        i = skip_ws(p, n, i + 1)
        if i < n and p[i] != 34:
            return MALFORMED  # a key must follow a comma
        closed[0] = False
        return i
    if p[i] == 125:  # '}'
        closed[0] = True
        return i + 1
    return MALFORMED


cdef Py_ssize_t _member_value(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                              unsigned char *key, Py_ssize_t *klen) noexcept nogil:
    """Read the key whose opening quote is at p[i] (decoded into ``key``, NAME_CAP bytes)
    and the ``:`` after it; return the index of the value's first byte, RAN_OUT or
    MALFORMED. A key longer than NAME_CAP is read whole but ``*klen`` is NAME_CAP + 1, so
    it matches nothing."""
    cdef Py_ssize_t r
    if i >= n:
        return RAN_OUT
    if p[i] != 34:
        return MALFORMED
    r = read_string(p, n, i + 1, key, NAME_CAP, klen)
    if r < 0:
        return r
    i = skip_ws(p, n, r)
    if i >= n:
        return RAN_OUT
    if p[i] != 58:  # ':'
        return MALFORMED
    i = skip_ws(p, n, i + 1)
    return i if i < n else RAN_OUT


cdef Py_ssize_t _read_inner(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                            const QualifierPath *path, unsigned char *val, Py_ssize_t *vlen,
                            bint stop) noexcept nogil:
    """Read the object whose ``{`` is at p[i], keeping in ``val``/``*vlen`` the string
    value of its first member named ``path.inner`` (``*vlen`` is Q_NONE when there is no
    such member, or it holds no string). Return the index after the object, or, with
    ``stop``, SETTLED as soon as that value is known; else RAN_OUT or MALFORMED."""
    cdef unsigned char key[NAME_CAP]
    cdef Py_ssize_t r, klen
    cdef bint found = False, closed = False
    vlen[0] = Q_NONE
    i = skip_ws(p, n, i + 1)
    if i >= n:
        return RAN_OUT
    if p[i] == 125:
        return i + 1
    # Invariant: p[i] is where a member's key must begin; `found` says whether a member
    # named path.inner came before it (only the first one counts, as for "type"); once
    # it has, *vlen is what that member held.
    while True:
        r = _member_value(p, n, i, key, &klen)
        if r < 0:
            return r
        i = r
        if not found and klen == path.inner_len and _bytes_eq(path.inner, key, klen):
            found = True
            if p[i] == 34:
                r = read_string(p, n, i + 1, val, NAME_CAP, vlen)
                if r < 0:
                    return r
                if stop:
                    return SETTLED
                i = r
            else:
                vlen[0] = Q_NONE  # not a string: the path can match no value
                if stop:
                    return SETTLED
                r = skip_value(p, n, i)
                if r < 0:
                    return r
                i = r
        else:
            r = skip_value(p, n, i)
            if r < 0:
                return r
            i = r
        r = _after_member(p, n, i, &closed)
        if r < 0 or closed:
            return r
        i = r


cdef inline int _entry_of(const Dialect *d, const unsigned char *name, Py_ssize_t n) noexcept nogil:
    """The dialect entry named name[0:n], or -1. A linear search over at most 32 short
    names, run once per line (at its "type" value)."""
    cdef int k
    if n > NAME_CAP:
        return -1  # an overlong or non-ASCII value (read_string's cap + 1)
    # Invariant: no entry before k is named name[0:n].
    for k in range(d.count):
        if d.entries[k].name_len == n and _bytes_eq(d.entries[k].name, name, n):
            return k
    return -1


cdef inline int _path_of(const Dialect *d, const unsigned char *key, Py_ssize_t n) noexcept nogil:
    """The qualifier path that begins with top-level key ``key`` (at most one does:
    DialectTable refuses two), or -1."""
    cdef int k
    # Invariant: no path before k begins with key[0:n].
    for k in range(d.path_count):
        if d.paths[k].key_len == n and _bytes_eq(d.paths[k].key, key, n):
            return k
    return -1


cdef inline uint8_t _qualified(const DialectEntry *e, const unsigned char *val,
                               Py_ssize_t vlen) noexcept nogil:
    """The kind of a line of qualified entry ``e`` whose path holds val[0:vlen] (``vlen``
    may be Q_NONE or NAME_CAP + 1: no string, or one no value can equal)."""
    cdef int k
    if 0 <= vlen <= NAME_CAP:
        # Invariant: val[0:vlen] equals none of e.values[0:k].
        for k in range(e.value_count):
            if e.value_lens[k] == vlen and _bytes_eq(e.values[k], val, vlen):
                return e.kind
    return KIND_OTHER


cdef uint8_t li_classify(const unsigned char *p, Py_ssize_t n, bint whole, int last_sig,
                         bint at_file_start, const Dialect *d) noexcept nogil:
    """Classify one line from its first ``n`` bytes (``whole`` when that is the line).

    ``last_sig`` is the line's last byte that is not whitespace (-1 if none). The walk
    reads top-level members until the first "type" key and maps its string value through
    the dialect table. A qualified entry also needs the string at its path (a top-level
    key, or a key inside the object a top-level key holds): a member on a path is read
    as the path says wherever it sits (only the first of that key counts), and the walk
    goes on past "type" until the path is settled or the object ends. It validates only
    what it walks, plus the closing brace; it stops as soon as the kind is known.

    Returns a LineKind; it cannot fail (a line is always some kind), hence noexcept.
    """
    cdef Py_ssize_t i = 0, r, klen, vlen
    cdef unsigned char key[NAME_CAP]
    cdef unsigned char val[NAME_CAP]
    cdef unsigned char qval[4][NAME_CAP]
    cdef Py_ssize_t qlen[4]
    cdef int k, e, want = -1
    cdef bint typed = False, stop, closed = False
    for k in range(4):
        qlen[k] = Q_UNSEEN  # no path met yet
    if at_file_start and n >= 3 and p[0] == 0xEF and p[1] == 0xBB and p[2] == 0xBF:
        i = 3  # a UTF-8 byte-order mark at byte 0 is tolerated, never part of a record
    i = skip_ws(p, n, i)
    if i == n:
        return KIND_BLANK if whole else KIND_UNDECIDED
    if p[i] != 123 or last_sig != 125:  # must look like {...}
        # The last byte is known even when the window is not the whole line (it is
        # carried across blocks), so a line that cannot end an object is CORRUPT at once.
        return KIND_CORRUPT
    i = skip_ws(p, n, i + 1)
    if i < n and p[i] == 125:
        return KIND_OTHER  # an object with no "type" key
    # Invariant: p[i] is where a top-level key must begin (or i == n); `want` is the
    # entry of the type value while it waits for its path, else -1; qlen[k] says what
    # the walk has met of path k.
    while True:
        r = _member_value(p, n, i, key, &klen)
        if r == MALFORMED:
            return KIND_CORRUPT
        if r == RAN_OUT:
            break
        i = r
        # "type", spelled out: the key is decoded, so "ty\u0070e" is it too.
        if not typed and klen == 4 and key[0] == 116 and key[1] == 121 and key[2] == 112 and key[3] == 101:
            typed = True
            if p[i] != 34:
                return KIND_OTHER  # "type" is not a string: not a record we know
            r = read_string(p, n, i + 1, val, NAME_CAP, &vlen)
            if r == MALFORMED:
                return KIND_CORRUPT
            if r == RAN_OUT:
                break
            e = _entry_of(d, val, vlen)
            if e < 0:
                return KIND_OTHER
            if d.entries[e].path < 0:
                return d.entries[e].kind
            k = d.entries[e].path
            if qlen[k] != Q_UNSEEN:  # the path came before "type"
                return _qualified(&d.entries[e], qval[k], qlen[k])
            # Qualified, and its path not met yet: walk on until it is.
            want = e
            i = r
        else:
            k = _path_of(d, key, klen)
            if k >= 0 and qlen[k] == Q_UNSEEN:
                # stop: this path is the one the type value waits for, so reading it
                # decides the line; otherwise its value is kept for a later "type".
                stop = want >= 0 and d.entries[want].path == k
                if d.paths[k].inner_len == 0 and p[i] == 34:
                    r = read_string(p, n, i + 1, qval[k], NAME_CAP, &qlen[k])
                    if r >= 0 and stop:
                        return _qualified(&d.entries[want], qval[k], qlen[k])
                elif d.paths[k].inner_len > 0 and p[i] == 123:
                    r = _read_inner(p, n, i, &d.paths[k], qval[k], &qlen[k], stop)
                    if (r >= 0 or r == SETTLED) and stop:
                        return _qualified(&d.entries[want], qval[k], qlen[k])
                else:
                    qlen[k] = Q_NONE  # not a string (or not an object): matches nothing
                    if stop:
                        return KIND_OTHER
                    r = skip_value(p, n, i)
            else:
                r = skip_value(p, n, i)
            if r == MALFORMED:
                return KIND_CORRUPT
            if r == RAN_OUT:
                break
            i = r
        r = _after_member(p, n, i, &closed)
        if r == MALFORMED:
            return KIND_CORRUPT
        if r == RAN_OUT:
            break
        if closed:
            return KIND_OTHER  # no "type" key, or its path is not in the object
        i = r
    # The walk ran out of bytes before it could decide.
    return KIND_CORRUPT if whole else KIND_UNDECIDED


# -- framing ------------------------------------------------------------------------


cdef inline bint _bytes_eq(const char *a, const unsigned char *b, Py_ssize_t n) noexcept nogil:
    """Whether a[0:n] == b[0:n] (a table name against decoded bytes; n <= NAME_CAP)."""
    cdef Py_ssize_t k
    # Invariant: a[0:k] == b[0:k].
    for k in range(n):
        if <unsigned char>a[k] != b[k]:
            return False
    return True


cdef inline int _last_sig(const unsigned char *p, Py_ssize_t n, int prev) noexcept nogil:
    """Last non-whitespace byte of p[0:n], or ``prev`` when there is none."""
    # Invariant: p[n:] (of the original n) is all whitespace. Walks back from the end,
    # so on a record (which ends in "}") it stops at the first byte it looks at.
    while n > 0:
        n -= 1
        if not is_ws(p[n]):
            return p[n]
    return prev


cdef int _push(LineBuf *out, int64_t start, uint8_t kind) noexcept nogil:
    """Append one line; 0 on success, -1 when memory runs out (the lines pushed so far
    stay valid, and ``_release`` frees them)."""
    cdef Py_ssize_t cap
    cdef int64_t *s
    cdef uint8_t *k
    if out.count == out.cap:
        # Doubling keeps pushes amortised O(1); the two arrays grow together, and
        # each is committed as soon as it is reallocated so a failure leaks nothing.
        cap = out.cap * 2 if out.cap else 4096
        s = <int64_t *>realloc(out.starts, cap * sizeof(int64_t))
        if s == NULL:
            return -1
        out.starts = s
        k = <uint8_t *>realloc(out.kinds, cap * sizeof(uint8_t))
        if k == NULL:
            return -1
        out.kinds = k
        out.cap = cap
    out.starts[out.count] = start
    out.kinds[out.count] = kind
    out.count += 1
    return 0


cdef int _scan_block(ScanState *st, LineBuf *out, const unsigned char *buf, Py_ssize_t n,
                     int64_t off, const Dialect *d) noexcept nogil:
    """Frame and classify the lines completed by ``buf`` (which sits at file offset
    ``off``); a trailing partial line is carried in ``st``. Returns 0, or -1 when
    memory runs out.

    The result never depends on where blocks begin or end: each line is classified
    from its first ``st.window`` bytes and its last significant byte, both of which
    are carried across blocks.
    """
    cdef const unsigned char *nl
    cdef Py_ssize_t p = 0, seg, take, length
    cdef uint8_t kind
    if st.in_line:
        # The line carried from earlier blocks: extend its window copy and its last
        # significant byte, and classify it once its "\n" is in this block.
        nl = <const unsigned char *>memchr(buf, 10, n)
        seg = (nl - buf) if nl != NULL else n
        take = min(seg, st.window - st.pre_len)
        if take > 0:
            memcpy(st.pre + st.pre_len, buf, take)
            st.pre_len += take
        st.last_sig = _last_sig(buf, seg, st.last_sig)
        st.line_len += seg
        if nl == NULL:
            return 0
        kind = li_classify(st.pre, st.pre_len, st.line_len <= st.window, st.last_sig,
                           st.line_start == 0, d)
        if _push(out, st.line_start, kind) < 0:
            return -1
        st.in_line = 0
        p = seg + 1
    # Invariant: p is the start of a line, and every line before it has been pushed.
    while p < n:
        # memchr is the framing: libc's vectorised search is what makes the scan run
        # at memory speed on the long lines transcripts are made of.
        nl = <const unsigned char *>memchr(buf + p, 10, n - p)
        if nl == NULL:
            # A line the block cuts: keep what the classifier needs of it, never more.
            st.in_line = 1
            st.line_start = off + p
            st.line_len = n - p
            st.pre_len = min(n - p, st.window)
            memcpy(st.pre, buf + p, st.pre_len)
            st.last_sig = _last_sig(buf + p, n - p, -1)
            return 0
        length = nl - (buf + p)
        # A whole line in the block is classified in place, without a copy.
        kind = li_classify(buf + p, min(length, st.window), length <= st.window,
                           _last_sig(buf + p, length, -1), off + p == 0, d)
        if _push(out, off + p, kind) < 0:
            return -1
        p += length + 1
    return 0


cdef bytes _ascii_name(object text, str what):
    """``text`` as 1-NAME_CAP ASCII bytes, or a ValueError naming ``what`` it is."""
    if not isinstance(text, str) or not text.isascii():
        raise ValueError(f"{what} {text!r} must be a str of ASCII characters")
    name = text.encode("ascii")
    if not 0 < len(name) <= NAME_CAP:
        raise ValueError(f"{what} {text!r} must be 1-{NAME_CAP} ASCII bytes")
    return name


class QualifiedKind(int):
    """A line kind that a type value has only where a second key agrees; elsewhere a line
    of that type is ``OTHER``.

    It is the int ``kind`` itself, so code that only asks which kind a type value stands
    for reads it like any other table value.

    Parameters
    ----------
    kind : int
        ``MESSAGE`` or ``COMPACTION``.
    path : str
        Where the second value is: a top-level key (``"subtype"``), or a top-level key
        and a key of the object it holds, joined by a dot (``"payload.type"``). Keys are
        1-64 ASCII bytes without dots; the first is not ``"type"``.
    *values : str
        The string values (1-4 of them, 1-64 ASCII bytes each) that make the line ``kind``.
    """

    def __new__(cls, kind, path, *values):
        if kind not in (KIND_MESSAGE, KIND_COMPACTION):
            raise ValueError(f"a qualified kind is MESSAGE or COMPACTION, got {kind!r}")
        if not isinstance(path, str):
            raise ValueError(f"path {path!r} must be a str")
        keys = path.split(".")
        if len(keys) > 2:
            raise ValueError(f"path {path!r} names at most two keys (a top-level key and one inside it)")
        for key in keys:
            _ascii_name(key, "path key")
        if keys[0] == "type":
            raise ValueError(f"path {path!r} cannot begin with \"type\", the key it qualifies")
        if not 0 < len(values) <= 4:
            raise ValueError(f"a qualified kind lists 1-4 values, got {len(values)}")
        for value in values:
            _ascii_name(value, "qualifier value")
        self = int.__new__(cls, kind)
        self._path = path
        self._values = tuple(values)
        return self

    @property
    def path(self):
        return self._path

    @property
    def values(self):
        return self._values

    def __getnewargs__(self):
        # copy and pickle rebuild it through __new__, which needs all three
        return (int(self), self._path, *self._values)

    def __repr__(self):
        return f"QualifiedKind({int(self)}, {self._path!r}, {', '.join(map(repr, self._values))})"


cdef class DialectTable:
    """Maps a line's top-level ``"type"`` value to a line kind.

    Parameters
    ----------
    kinds : dict[str, int]
        Type value -> kind (``MESSAGE``, ``COMPACTION``, ``OTHER``, or a
        :class:`QualifiedKind`). At most 32 entries of at most 64 ASCII bytes each; the
        qualified ones use at most 4 distinct paths, no two beginning with the same key.
    """
    # c_dialect (the table as the classifier reads it) is declared in lineindex.pxd.

    def __init__(self, dict kinds):
        cdef Dialect built
        cdef DialectEntry *entry
        cdef QualifierPath *qp
        cdef bytes name, part
        cdef int i = 0, k
        memset(&built, 0, sizeof(Dialect))
        if len(kinds) > 32:
            raise ValueError(f"a dialect table holds at most 32 type names, got {len(kinds)}")
        paths = []  # (key, inner) of each distinct path, in order of first use
        for key, kind in kinds.items():
            name = _ascii_name(key, "type name")
            if kind not in (KIND_MESSAGE, KIND_COMPACTION, KIND_OTHER):
                raise ValueError(f"kind for {key!r} must be MESSAGE, COMPACTION or OTHER, got {kind!r}")
            entry = &built.entries[i]
            memcpy(entry.name, <const char *>name, len(name))
            entry.name_len = len(name)
            entry.kind = kind
            entry.path = -1
            if isinstance(kind, QualifiedKind):
                keys = tuple(kind.path.split("."))
                if keys not in paths:
                    # One top-level key opens at most one path, so the walk meeting that
                    # key knows what to read inside it.
                    if any(p[0] == keys[0] for p in paths):
                        raise ValueError(f"qualifier paths must begin with different keys: "
                                         f"{kind.path!r} and {'.'.join(next(p for p in paths if p[0] == keys[0]))!r}")
                    if len(paths) == 4:
                        raise ValueError("a dialect table uses at most 4 qualifier paths")
                    paths.append(keys)
                entry.path = paths.index(keys)
                entry.value_count = len(kind.values)
                for k, value in enumerate(kind.values):
                    part = value.encode("ascii")
                    memcpy(entry.values[k], <const char *>part, len(part))
                    entry.value_lens[k] = len(part)
            i += 1
        built.count = i
        for k, keys in enumerate(paths):
            qp = &built.paths[k]
            part = keys[0].encode("ascii")
            memcpy(qp.key, <const char *>part, len(part))
            qp.key_len = len(part)
            if len(keys) == 2:
                part = keys[1].encode("ascii")
                memcpy(qp.inner, <const char *>part, len(part))
                qp.inner_len = len(part)
        built.path_count = len(paths)
        self.c_dialect = built


class ScanResult:
    """Lines framed by one scan.

    Attributes
    ----------
    starts : bytes
        Native-endian int64 start offset of each complete line.
    kinds : bytes
        One kind byte per complete line.
    indexed_end : int
        Offset just past the last ``\\n`` seen (the scan's start when there is none).
    scanned_end : int
        Offset where the scan stopped (end of file or of the requested range).
    links : bytes or None
        Four little-endian uint64 links per line, as ``linetree.line_links`` gives
        them, when the scan was asked for them (``filescan.scan_fd``'s ``link_keys``).
    """
    __slots__ = ("starts", "kinds", "indexed_end", "scanned_end", "links")

    def __init__(self, starts, kinds, indexed_end, scanned_end, links=None):
        self.starts = starts
        self.kinds = kinds
        self.indexed_end = indexed_end
        self.scanned_end = scanned_end
        self.links = links

    @property
    def torn_bytes(self):
        """Bytes after the last ``\\n``: an unterminated tail, never a record."""
        return self.scanned_end - self.indexed_end


cdef object _result(LineBuf *out, ScanState *st, int64_t scanned_end):
    """The ScanResult of one scanner (a Python object: an exception propagates as NULL).
    The lines are copied out, so ``_release`` may free them right after."""
    # A line still open at the end is the torn tail: the index ends where it starts.
    cdef int64_t indexed_end = st.line_start if st.in_line else scanned_end
    return ScanResult(
        PyBytes_FromStringAndSize(<char *>out.starts, out.count * sizeof(int64_t)),
        PyBytes_FromStringAndSize(<char *>out.kinds, out.count),
        indexed_end, scanned_end)


cdef int _state_init(ScanState *st, LineBuf *out, Py_ssize_t window) noexcept nogil:
    """Empty scanner state and output; 0, or -1 when memory runs out (``_release`` is
    safe either way). ``window`` >= 1 is checked by the caller."""
    st.in_line = 0
    st.pre_len = 0
    st.line_len = 0
    st.line_start = 0
    st.last_sig = -1
    st.window = window
    out.starts = NULL
    out.kinds = NULL
    out.count = 0
    out.cap = 0
    st.pre = <unsigned char *>malloc(window)
    return 0 if st.pre != NULL else -1


cdef int _init(ScanState *st, LineBuf *out, Py_ssize_t window) except -1:
    """``_state_init`` under the GIL: 0, or -1 with ValueError (a window below 1) or
    MemoryError set. ``_release`` is safe after either."""
    if window < 1:
        raise ValueError(f"classify_window must be >= 1, got {window}")
    if _state_init(st, out, window) < 0:
        raise MemoryError()
    return 0


cdef void _release(ScanState *st, LineBuf *out) noexcept nogil:
    """Free a scanner's buffers; safe twice, and after a failed ``_state_init``."""
    free(st.pre)
    free(out.starts)
    free(out.kinds)
    st.pre = NULL
    out.starts = NULL
    out.kinds = NULL


def scan_bytes(const unsigned char[::1] data not None, DialectTable dialect not None, *,
               long long base_offset=0, Py_ssize_t classify_window=DEFAULT_CLASSIFY_WINDOW):
    """Frame and classify the lines of an in-memory buffer.

    Parameters
    ----------
    data : bytes-like
        The bytes, as if they sat at file offset ``base_offset``.
    dialect : DialectTable
    base_offset : int
        File offset of ``data[0]``; a byte-order mark is only skipped at offset 0.
    classify_window : int
        How many leading bytes of a line the classifier may read.

    Returns
    -------
    ScanResult
    """
    cdef ScanState st
    cdef LineBuf out
    cdef int rc
    cdef Py_ssize_t n = data.shape[0]
    # Offsets stay below 2**62, so no sum of an offset and a length can wrap int64.
    if base_offset < 0 or base_offset > (1 << 62) - n:
        raise ValueError(f"base_offset must be in 0..2**62 - len(data), got {base_offset}")
    _init(&st, &out, classify_window)
    try:
        # One block: the whole buffer is in memory, so nothing is carried but the
        # torn tail, which _result reads from st.
        with nogil:
            rc = _scan_block(&st, &out, &data[0] if n else NULL, n, base_offset, &dialect.c_dialect)
        if rc < 0:
            raise MemoryError()
        return _result(&out, &st, base_offset + n)
    finally:
        _release(&st, &out)


def sequence_lines(const unsigned char[::1] kinds not None, long long line0=0):
    """Line numbers of the message sequence (message and corrupt lines: a corrupt line
    keeps its place, decision 0001) and of compaction lines among ``kinds``, whose
    first is line ``line0``.

    Returns
    -------
    tuple[bytes, bytes]
        Native-endian int64 line numbers, ascending.
    """
    cdef Py_ssize_t n = kinds.shape[0], i, m = 0, c = 0
    cdef int64_t *mp
    cdef int64_t *cp
    cdef bytes messages, compactions
    if line0 < 0 or line0 > (1 << 62):
        raise ValueError(f"line0 must be in 0..2**62, got {line0}")
    # Two passes, count then fill, so each result is allocated once at its size.
    with nogil:
        # Invariant: m and c count the matching lines among kinds[0:i].
        for i in range(n):
            if kinds[i] == KIND_MESSAGE or kinds[i] == KIND_CORRUPT:
                m += 1
            elif kinds[i] == KIND_COMPACTION:
                c += 1
    messages = PyBytes_FromStringAndSize(NULL, m * sizeof(int64_t))
    compactions = PyBytes_FromStringAndSize(NULL, c * sizeof(int64_t))
    mp = <int64_t *><char *>messages
    cp = <int64_t *><char *>compactions
    m = 0
    c = 0
    with nogil:
        # Invariant: mp[:m] and cp[:c] hold the matching lines before line0 + i.
        for i in range(n):
            if kinds[i] == KIND_MESSAGE or kinds[i] == KIND_CORRUPT:
                mp[m] = line0 + i
                m += 1
            elif kinds[i] == KIND_COMPACTION:
                cp[c] = line0 + i
                c += 1
    return messages, compactions


def rises_within(values not None, long long low, long long high):
    """Whether the native-endian int64 ``values`` (any contiguous buffer: bytes, an
    array) rise strictly, the first at least ``low`` and the last at most ``high``
    (True of none). One pass, where numpy takes a comparison, a reduction and their
    temporaries: a window checks every span of offsets and line numbers it reads."""
    cdef Py_buffer view
    cdef Py_ssize_t n, i
    cdef int64_t prev, cur
    cdef const unsigned char *p
    cdef bint ok = True
    PyObject_GetBuffer(values, &view, PyBUF_SIMPLE)
    try:
        if view.len % sizeof(int64_t):
            raise ValueError(f"values must be whole int64s, got {view.len} bytes")
        n = view.len // sizeof(int64_t)
        p = <const unsigned char *>view.buf
        if n:
            with nogil:
                # Loaded by memcpy: a slice of a buffer need not be aligned.
                memcpy(&prev, p, sizeof(int64_t))
                ok = prev >= low
                # Invariant: values[0:i] rise strictly from at least low; prev is values[i - 1].
                i = 1
                while ok and i < n:
                    memcpy(&cur, p + i * sizeof(int64_t), sizeof(int64_t))
                    ok = cur > prev
                    prev = cur
                    i += 1
                ok = ok and prev <= high
        return ok
    finally:
        PyBuffer_Release(&view)
