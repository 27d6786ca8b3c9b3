"""Frame JSONL into line offsets and classify each line: the index a transcript is read by.

Everything here works on raw bytes and never decodes JSON into Python objects: framing
a 1 GB transcript must cost about what ``wc -l`` costs. A line's kind is decided from
its first ``classify_window`` bytes and its last significant byte, both carried across
reads, so the result never depends on where a read or a part of the scan begins.

The display projection of one line lives in ``projection``; the JSON lexing both walk
with is ``jsonlex.pxd``.

The slow, obviously-correct twin of this module is ``tests/reference/lineindex.py``;
property tests assert the two agree on arbitrary bytes.
"""

import os

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno, EINTR, ENOMEM
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memchr, memcpy, memset, strerror

from boundctx._native._posix cimport (
    MADV_HUGEPAGE, madvise, posix_memalign, pread,
    pthread_cond_broadcast, pthread_cond_destroy, pthread_cond_init, pthread_cond_t,
    pthread_cond_wait, pthread_create, pthread_join, pthread_mutex_destroy,
    pthread_mutex_init, pthread_mutex_lock, pthread_mutex_t, pthread_mutex_unlock, pthread_t,
)
from boundctx._native.jsonlex cimport MALFORMED, RAN_OUT, is_ws, read_string, skip_value, skip_ws

cdef extern from *:
    """
    #ifndef BOUNDCTX_CHECKS
    #define BOUNDCTX_CHECKS 0
    #endif
    /* A part's progress, read by the thread that reports it while another writes it. */
    static inline long long bx_atomic_load(const long long *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline void bx_atomic_store(long long *p, long long v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    static inline int bx_atomic_load_int(const int *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline void bx_atomic_store_int(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    """
    int BOUNDCTX_CHECKS
    long long _atomic_load "bx_atomic_load" (const long long *p) noexcept nogil
    void _atomic_store "bx_atomic_store" (long long *p, long long v) noexcept nogil
    int _atomic_load_int "bx_atomic_load_int" (const int *p) noexcept nogil
    void _atomic_store_int "bx_atomic_store_int" (int *p, int v) noexcept nogil

#: True when built with -DBOUNDCTX_CYTHON_CHECKS=ON (bounds and wraparound checks on).
BUILT_WITH_CHECKS = bool(BOUNDCTX_CHECKS)

MESSAGE = KIND_MESSAGE
COMPACTION = KIND_COMPACTION
OTHER = KIND_OTHER
CORRUPT = KIND_CORRUPT
BLANK = KIND_BLANK
UNDECIDED = KIND_UNDECIDED

DEFAULT_CLASSIFY_WINDOW = 1 << 20
DEFAULT_BLOCK_SIZE = 1 << 20  # 256 KiB-2 MiB measured best here (bench/RESULTS.md)

cdef enum:
    # A scan of a big range is cut into parts scanned side by side (scan_fd).
    _MAX_SCAN_THREADS = 4
    _MIN_PART_BYTES = 16 << 20   # a part smaller than this is not worth a thread
    MAX_CUT_SEARCH = 16 << 20    # how far past a cut point a line start is looked for
    HUGE_PAGE = 2 << 20          # x86-64's; elsewhere only an alignment

MAX_SCAN_THREADS = _MAX_SCAN_THREADS
MIN_PART_BYTES = _MIN_PART_BYTES

cdef enum:
    NAME_CAP = 64     # longest decoded "type" value (or qualifier key/value) a dialect may name


cdef int raise_errno(int err, str what=None) except -1:
    """Raise ``OSError(err, strerror(err))``, its message led by ``what`` when given.
    Always raises: -1 is the only return, and it means an exception is set."""
    message = strerror(err).decode("utf-8", "replace")
    raise OSError(err, message if what is None else f"{what}: {message}")


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
    cdef Dialect c_dialect

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
    """
    __slots__ = ("starts", "kinds", "indexed_end", "scanned_end")

    def __init__(self, starts, kinds, indexed_end, scanned_end):
        self.starts = starts
        self.kinds = kinds
        self.indexed_end = indexed_end
        self.scanned_end = scanned_end

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


# -- reading a file -----------------------------------------------------------------
#
# A file is read with pread into buffers this module owns, never mapped: a transcript
# may be truncated by another process while it is scanned, and a read then returns
# fewer bytes where a mapping would raise SIGBUS. Reads run without the GIL, on reader
# or worker threads; an error travels as an errno value, and becomes an OSError only
# back under the GIL (raise_errno).


cdef ssize_t _pread(int fd, void *buf, size_t want, long long at) noexcept nogil:
    """pread, retried while a signal interrupts it: the bytes read (perhaps fewer than
    ``want``: callers scan what came and read on from there), 0 at end of file, or -1
    with errno set."""
    cdef ssize_t got = pread(fd, buf, want, at)
    # Invariant: every earlier try failed with EINTR and read nothing.
    while got < 0 and errno == EINTR:
        got = pread(fd, buf, want, at)
    return got


cdef struct Prefetch:
    # Two blocks in flight: a reader thread fills one with pread while the scanning
    # thread scans the other, so the kernel's copy and the scan overlap.
    int fd
    unsigned char *buf[2]
    ssize_t got[2]          # bytes read into each slot; 0 = end of range, -1 = error
    int err[2]              # errno of a failed read into each slot, else 0
    int full[2]             # 1 while a slot holds data the scanner has not consumed
    long long pos           # next offset the reader reads (written by the reader only)
    long long end           # -1: read to end of file
    size_t block
    int stop                # set by the scanner to make the reader return
    pthread_mutex_t mu      # guards got, err, full and stop
    pthread_cond_t cv       # broadcast whenever a slot changes hands, and on stop


cdef void _prefetch_once(Prefetch *pf) noexcept nogil:
    """Without a reader thread: fill slot 0 with the (only) block and slot 1 with the
    end of the range, which is all the scan loop will ask for. Cannot fail: a failed
    read is left in ``pf.err[0]`` for the scan loop to report."""
    cdef ssize_t got = 0
    cdef size_t want = <size_t>(pf.end - pf.pos)
    pf.err[0] = 0
    if want:
        got = _pread(pf.fd, pf.buf[0], want, pf.pos)
        if got < 0:
            pf.err[0] = errno
    pf.got[0] = got
    pf.full[0] = 1
    pf.got[1] = 0
    pf.err[1] = 0
    pf.full[1] = 1


cdef void *_prefetch_main(void *arg) noexcept nogil:
    """Reader thread: fill slots 0, 1, 0, ... until end of range, an error, or stop.
    Returns NULL always; a failed read is left in ``pf.err`` for the scan loop."""
    cdef Prefetch *pf = <Prefetch *>arg
    cdef int slot = 0, e
    cdef ssize_t got
    cdef size_t want
    # Invariant: the blocks before pf.pos have been read, in file order, into slots
    # 0, 1, 0, ..., and `slot` is the one the block at pf.pos goes into. The scanner
    # takes slots in the same order, so it meets the blocks in file order.
    while True:
        pthread_mutex_lock(&pf.mu)
        # Wait (through spurious wake-ups) for the scanner to hand the slot back.
        while pf.full[slot] and not pf.stop:
            pthread_cond_wait(&pf.cv, &pf.mu)
        if pf.stop:
            pthread_mutex_unlock(&pf.mu)
            return NULL
        pthread_mutex_unlock(&pf.mu)
        # Invariant: only this thread touches pf.buf[slot] while pf.full[slot] == 0.
        e = 0
        if pf.end != -1 and pf.pos >= pf.end:
            got = 0
        else:
            want = pf.block if pf.end == -1 else <size_t>min(<long long>pf.block, pf.end - pf.pos)
            got = _pread(pf.fd, pf.buf[slot], want, pf.pos)
            if got < 0:
                e = errno
        pthread_mutex_lock(&pf.mu)
        pf.got[slot] = got
        pf.err[slot] = e
        pf.full[slot] = 1
        if got > 0:
            pf.pos += got
        pthread_cond_broadcast(&pf.cv)
        pthread_mutex_unlock(&pf.mu)
        if got <= 0:
            return NULL  # the scanner stops at a slot with got <= 0: nothing more to read
        slot ^= 1


cdef struct Part:
    # One byte range of a scan, scanned block by block through its own prefetch. A
    # range other than the last begins and ends at line starts, so the lines of the
    # parts, concatenated, are the lines of the whole range.
    Prefetch pf
    ScanState st
    LineBuf out
    const Dialect *d
    long long start
    long long end           # -1: to end of file
    long long pos           # offset the scan has reached (atomic: others read it)
    int slot                # the prefetch slot the next block is scanned from
    int direct              # 1: read each block in the scanning thread (no reader thread)
    int err                 # errno of a failed read, else 0
    int nomem               # 1 when memory ran out (the scan stopped there)
    pthread_t reader
    int reader_started
    int opened              # 1 once _part_open ran: _part_close has work to do
    int stop                # atomic: set by the caller to abandon a worker's scan
    pthread_t worker
    int worker_started


cdef unsigned char *_read_buffers(size_t block) noexcept nogil:
    """Both slots of a part, ``2 * block`` bytes in one allocation, aligned so the
    kernel may back them with huge pages (asked for, where it is ``madvise``-only). The
    kernel's copy into them is most of a scan's time, and into 4 KiB pages fresh from
    ``mmap`` it was measured ~30% slower (a TLB miss every 4 KiB written). NULL when
    memory runs out."""
    cdef void *p = NULL
    cdef size_t size = (2 * block + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
    if posix_memalign(&p, HUGE_PAGE, size) != 0:
        return NULL
    madvise(p, size, MADV_HUGEPAGE)  # a hint: no huge pages, still correct
    return <unsigned char *>p


cdef int _part_open(Part *pt, int fd, long long start, long long end, Py_ssize_t window,
                    size_t block, const Dialect *d, bint direct) noexcept nogil:
    """Set up a part (``pt`` zeroed by the caller) and start its reads. Returns 0, or an
    errno (ENOMEM included); ``_part_close`` is safe after either.

    ``direct``: the scanning thread reads each block itself. With a part per core the
    cores are busy already, and a reader thread per part only adds a hand-off (two
    context switches) per block."""
    # The mutex and condition come first: _part_close destroys them whatever failed.
    pt.opened = 1
    pt.d = d
    pt.start = start
    pt.end = end
    pt.pos = start
    pthread_mutex_init(&pt.pf.mu, NULL)
    pthread_cond_init(&pt.pf.cv, NULL)
    pt.pf.fd = fd
    pt.pf.pos = start
    pt.pf.end = end
    pt.pf.block = block
    if _state_init(&pt.st, &pt.out, window) < 0:
        pt.nomem = 1
        return ENOMEM
    pt.pf.buf[0] = _read_buffers(block)
    if pt.pf.buf[0] == NULL:
        pt.nomem = 1
        return ENOMEM
    pt.pf.buf[1] = pt.pf.buf[0] + block
    if direct:
        pt.direct = 1
        return 0
    if end != -1 and end - start <= <long long>block:
        _prefetch_once(&pt.pf)  # one block at most: a thread would cost more than it saves
        return 0
    # pthread_create returns an errno value itself; scan_fd reports it as an OSError.
    cdef int e = pthread_create(&pt.reader, NULL, _prefetch_main, &pt.pf)
    if e == 0:
        pt.reader_started = 1
    return e


cdef int _part_step(Part *pt) noexcept nogil:
    """Scan the part's next block. Returns 1 while there is more, 0 when the part is
    done: at its end, at end of file, or stopped by a failed read (``pt.err``) or by
    memory running out (``pt.nomem``)."""
    cdef Prefetch *pf = &pt.pf
    cdef ssize_t got
    cdef int rc = 0, slot = pt.slot
    if pt.direct:
        return _part_step_direct(pt)
    pthread_mutex_lock(&pf.mu)
    # Wait (through spurious wake-ups) until the reader has filled the slot. It always
    # does: it stops only after filling a slot with got <= 0, which ends this part.
    while not pf.full[slot]:
        pthread_cond_wait(&pf.cv, &pf.mu)
    got = pf.got[slot]
    pt.err = pf.err[slot]
    pthread_mutex_unlock(&pf.mu)
    if got <= 0:
        return 0  # end of range, end of file (the file may have shrunk) or an error
    # Scanned outside the lock: the slot is this thread's until it is handed back, and
    # the reader fills the other slot meanwhile.
    rc = _scan_block(&pt.st, &pt.out, pf.buf[slot], got, pt.pos, pt.d)
    pthread_mutex_lock(&pf.mu)
    pf.full[slot] = 0  # hand the slot back to the reader
    pthread_cond_broadcast(&pf.cv)
    pthread_mutex_unlock(&pf.mu)
    if rc < 0:
        pt.nomem = 1
        return 0
    _atomic_store(&pt.pos, pt.pos + got)  # relaxed: progress reports only read it
    pt.slot = slot ^ 1
    return 1


cdef int _part_step_direct(Part *pt) noexcept nogil:
    """``_part_step`` reading the block in this thread (same return values). One slot
    is enough: the read and the scan of a block never overlap here."""
    cdef Prefetch *pf = &pt.pf
    cdef ssize_t got
    cdef size_t want
    if pt.end != -1 and pt.pos >= pt.end:
        return 0
    want = pf.block if pt.end == -1 else <size_t>min(<long long>pf.block, pt.end - pt.pos)
    got = _pread(pf.fd, pf.buf[0], want, pt.pos)
    if got < 0:
        pt.err = errno
    if got <= 0:
        return 0
    if _scan_block(&pt.st, &pt.out, pf.buf[0], got, pt.pos, pt.d) < 0:
        pt.nomem = 1
        return 0
    _atomic_store(&pt.pos, pt.pos + got)
    return 1


cdef void *_part_main(void *arg) noexcept nogil:
    """Worker thread: scan one part to its end (or until told to stop). Returns NULL;
    what went wrong is in ``pt.err`` / ``pt.nomem`` for the caller to read after join."""
    cdef Part *pt = <Part *>arg
    # Invariant: pt.out holds every line that ends in [pt.start, pt.pos); the stop flag
    # is looked at between blocks, so an abandoned scan ends within one block.
    while not _atomic_load_int(&pt.stop) and _part_step(pt):
        pass
    return NULL


cdef void _part_close(Part *pt) noexcept nogil:
    """Stop and join the part's threads and free its buffers (not its output: the
    caller frees that with ``_release`` once the result is built). Safe on a part that
    was never opened, or whose open failed part way."""
    if not pt.opened:
        return
    # A part has a worker thread (a part after the first, in a scan cut into parts: it
    # reads its blocks itself) or a reader thread (a scan in one part), never both.
    if pt.worker_started:
        _atomic_store_int(&pt.stop, 1)
        pthread_join(pt.worker, NULL)
        pt.worker_started = 0
    if pt.reader_started:
        pthread_mutex_lock(&pt.pf.mu)
        pt.pf.stop = 1
        pthread_cond_broadcast(&pt.pf.cv)
        pthread_mutex_unlock(&pt.pf.mu)
        pthread_join(pt.reader, NULL)
        pt.reader_started = 0
    pthread_cond_destroy(&pt.pf.cv)
    pthread_mutex_destroy(&pt.pf.mu)
    free(pt.pf.buf[0])  # both slots: one allocation
    pt.pf.buf[0] = NULL
    pt.pf.buf[1] = NULL


cdef long long _line_start_from(int fd, long long pos, long long limit) noexcept nogil:
    """The first line start at or after ``pos`` (> 0): one past the first ``\\n`` at
    ``pos - 1`` or later, looked for before ``limit``. -1 when there is none there or a
    read fails (the caller then does not split at this point)."""
    cdef unsigned char buf[65536]
    cdef const unsigned char *nl
    cdef ssize_t got
    cdef long long at = pos - 1
    # Invariant: no "\\n" lies in [pos - 1, at). The byte at pos - 1 is included so a
    # cut point that is already a line start is kept as it is.
    while at < limit:
        got = _pread(fd, buf, <size_t>min(<long long>sizeof(buf), limit - at), at)
        if got <= 0:
            return -1
        nl = <const unsigned char *>memchr(buf, 10, got)
        if nl != NULL:
            return at + (nl - buf) + 1
        at += got
    return -1


cdef object _joined_result(Part *parts, int n):
    """One ScanResult from the parts, in order. A part other than the last that ended
    short of its end, or inside a line, means the file changed under the scan: the
    result stops there, as a scan that met the end of the file would."""
    cdef int k, last = n - 1
    cdef Py_ssize_t total = 0, at = 0
    cdef bytes starts, kinds
    # Errors first, in part order: a failed read anywhere fails the whole scan.
    for k in range(n):
        if parts[k].err:
            raise_errno(parts[k].err)
        if parts[k].nomem:
            raise MemoryError()
    for k in range(n - 1):
        if parts[k].pos != parts[k].end or parts[k].st.in_line:
            last = k
            break
    if last == 0:
        return _result(&parts[0].out, &parts[0].st, parts[0].pos)  # no copy to join
    # Parts are contiguous and each ends at a line start, so their lines concatenate.
    for k in range(last + 1):
        total += parts[k].out.count
    starts = PyBytes_FromStringAndSize(NULL, total * sizeof(int64_t))
    kinds = PyBytes_FromStringAndSize(NULL, total)
    for k in range(last + 1):
        memcpy(<char *>starts + at * sizeof(int64_t), parts[k].out.starts,
               parts[k].out.count * sizeof(int64_t))
        memcpy(<char *>kinds + at, parts[k].out.kinds, parts[k].out.count)
        at += parts[k].out.count
    return ScanResult(starts, kinds,
                      parts[last].st.line_start if parts[last].st.in_line else parts[last].pos,
                      parts[last].pos)


def _default_threads():
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_SCAN_THREADS))


def scan_fd(int fd, DialectTable dialect not None, *, long long start=0, long long end=-1,
            Py_ssize_t classify_window=DEFAULT_CLASSIFY_WINDOW,
            Py_ssize_t block_size=DEFAULT_BLOCK_SIZE, int threads=0,
            long long min_part=MIN_PART_BYTES, progress=None):
    """Frame and classify the lines of an open file, from ``start`` up to ``end`` (or
    end of file when ``end`` is -1).

    The file is read with ``pread`` (1 MiB blocks by default), not mapped: another
    process may truncate a transcript while it is being scanned, and a read then
    simply returns fewer bytes where a mapping would raise SIGBUS. A reader thread
    reads the next block while another scans the current one, with the GIL released.
    A range of at least two ``min_part`` is cut at line starts into up to ``threads``
    parts scanned side by side, each with its own reader: lines are classified one by
    one, so the result is the same for any cut.

    Parameters
    ----------
    fd : int
        A file descriptor open for reading.
    dialect : DialectTable
    start, end : int
        Byte range; ``start`` must be a line start.
    classify_window, block_size : int
    threads : int
        Parts to scan side by side; 0 (default) means one per core, at most
        ``MAX_SCAN_THREADS``.
    min_part : int
        Smallest part worth a thread of its own (bytes).
    progress : callable, optional
        Called as ``progress(bytes_done)`` after each block of the first part (the
        bytes of every part counted), with the GIL held.

    Returns
    -------
    ScanResult
        ``scanned_end`` is where reading stopped: ``end``, or earlier if the file
        ended first.

    Raises
    ------
    OSError
        When a read fails, or a thread cannot start.
    """
    cdef Part *parts = NULL
    cdef int n = 1, k, err = 0, more = 1
    cdef long long span, cut, prev, done, target
    cdef long long cuts[_MAX_SCAN_THREADS + 1]
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if end != -1 and end < start:
        raise ValueError(f"end must be -1 or >= start ({start}), got {end}")
    if block_size < 4096:
        raise ValueError(f"block_size must be >= 4096, got {block_size}")
    if classify_window < 1:
        raise ValueError(f"classify_window must be >= 1, got {classify_window}")
    if threads < 0:
        raise ValueError(f"threads must be >= 0, got {threads}")
    if min_part < 1:
        raise ValueError(f"min_part must be >= 1, got {min_part}")
    if threads == 0:
        threads = _default_threads()
    threads = min(threads, MAX_SCAN_THREADS)
    # Part k scans [cuts[k], cuts[k + 1]); the last part ends at `end` (maybe -1: end
    # of file, so bytes appended during the scan are read as one scan would read them).
    cuts[0] = start
    if threads > 1:
        span = (end if end != -1 else os.fstat(fd).st_size) - start
        if span >= 2 * min_part:
            threads = <int>min(<long long>threads, span // min_part)
            prev = start
            # Invariant: cuts[0:n] are increasing line starts in [start, start + span),
            # prev == cuts[n - 1]. A cut that finds no line start near its target is
            # skipped: fewer, longer parts, never a line split between two.
            for k in range(1, threads):
                target = max(start + span * k // threads, prev + 1)
                with nogil:
                    cut = _line_start_from(fd, target, min(start + span, target + MAX_CUT_SEARCH))
                if cut > prev and cut < start + span:
                    cuts[n] = cut
                    n += 1
                    prev = cut
    cuts[n] = end
    parts = <Part *>calloc(n, sizeof(Part))
    if parts == NULL:
        raise MemoryError()
    try:
        with nogil:
            # Invariant: parts[0:k] are open, and parts[1:k] have their workers running.
            # Part 0 is scanned by this thread, below, so progress can be reported
            # with the GIL between its blocks.
            for k in range(n):
                err = _part_open(&parts[k], fd, cuts[k], cuts[k + 1], classify_window,
                                 <size_t>block_size, &dialect.c_dialect, n > 1)
                if err:
                    break
                if k:
                    err = pthread_create(&parts[k].worker, NULL, _part_main, &parts[k])
                    if err:
                        break
                    parts[k].worker_started = 1
        if err == ENOMEM:
            raise MemoryError()
        if err:
            raise_errno(err, "cannot start a scan thread")
        # Invariant: parts[0].out holds every line that ends in [cuts[0], parts[0].pos);
        # the GIL is taken back between blocks only, to report progress.
        while more:
            with nogil:
                more = _part_step(&parts[0])
            if more and progress is not None:
                done = 0
                for k in range(n):
                    done += _atomic_load(&parts[k].pos) - parts[k].start
                progress(done)
        with nogil:
            # Invariant: the workers of parts[1:k] have been joined, so their output is
            # complete and no thread writes it any more.
            for k in range(1, n):
                if parts[k].worker_started:
                    pthread_join(parts[k].worker, NULL)
                    parts[k].worker_started = 0
        if n > 1 and progress is not None:
            done = 0
            for k in range(n):
                done += parts[k].pos - parts[k].start
            progress(done)
        return _joined_result(parts, n)
    finally:
        # Runs on every path, errors included: no thread outlives the call, and no
        # buffer either (the result holds copies).
        with nogil:
            # Invariant: parts[0:k] are closed and released.
            for k in range(n):
                _part_close(&parts[k])
                _release(&parts[k].st, &parts[k].out)
        free(parts)


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
