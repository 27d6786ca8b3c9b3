"""Frame JSONL into line offsets, classify each line, and project one line for display.

Everything here works on raw bytes and never decodes JSON into Python objects: framing
a 1 GB transcript must cost about what ``wc -l`` costs, and opening a window that holds
a 5 MB tool output must not read or copy that output.

The slow, obviously-correct twin of this module is ``tests/reference/lineindex.py``;
property tests assert the two agree on arbitrary bytes.
"""

import os

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno, EINTR, ENOMEM
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memchr, memcpy, memset, strerror

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void *buf, size_t count, long long offset)

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void **memptr, size_t alignment, size_t size)

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void *addr, size_t length, int advice)
    int MADV_HUGEPAGE

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t *thread, const void *attr,
                       void *(*start)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t thread, void **retval)
    int pthread_mutex_init(pthread_mutex_t *mu, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mu)
    int pthread_mutex_lock(pthread_mutex_t *mu)
    int pthread_mutex_unlock(pthread_mutex_t *mu)
    int pthread_cond_init(pthread_cond_t *cv, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *cv)
    int pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
    int pthread_cond_broadcast(pthread_cond_t *cv)

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

# Return codes of the string/value skippers below.
cdef enum:
    RAN_OUT = -1      # the prefix ended inside the construct: more bytes could decide
    MALFORMED = -2    # not JSON, whatever follows

cdef enum:
    NAME_CAP = 64     # longest decoded "type" value a dialect may name
    MAX_DEPTH = 256   # deepest nesting the display projection follows
    SHORT_STRING = 128  # string values this short are metadata, kept whole for display


cdef inline bint _is_ws(unsigned char c) noexcept nogil:
    # JSON whitespace less "\n", which never occurs inside a framed line.
    return c == 32 or c == 9 or c == 13


cdef inline int _hexval(unsigned char c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef Py_ssize_t _read_string(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                             unsigned char *out, Py_ssize_t cap,
                             Py_ssize_t *out_len) noexcept nogil:
    """Read the JSON string whose opening quote is at p[i-1]; return the index after
    the closing quote, RAN_OUT or MALFORMED.

    Decodes into ``out`` (may be NULL) while the decoded text fits ``cap`` bytes;
    ``*out_len`` becomes ``cap + 1`` when it does not, or when a ``\\u`` escape decodes
    to a non-ASCII code point (dialect names are ASCII, so such a name can never match).
    """
    cdef unsigned char c, e
    cdef int h0, h1, h2, h3, ch
    out_len[0] = 0
    while i < n:
        c = p[i]
        if c == 34:  # '"'
            return i + 1
        if c == 92:  # '\\'
            if i + 1 >= n:
                return RAN_OUT
            e = p[i + 1]
            if e == 34 or e == 92 or e == 47:
                ch = e
            elif e == 98:
                ch = 8
            elif e == 102:
                ch = 12
            elif e == 110:
                ch = 10
            elif e == 114:
                ch = 13
            elif e == 116:
                ch = 9
            elif e == 117:  # \uXXXX
                if i + 6 > n:
                    return RAN_OUT
                h0 = _hexval(p[i + 2]); h1 = _hexval(p[i + 3])
                h2 = _hexval(p[i + 4]); h3 = _hexval(p[i + 5])
                if h0 < 0 or h1 < 0 or h2 < 0 or h3 < 0:
                    return MALFORMED
                ch = (h0 << 12) | (h1 << 8) | (h2 << 4) | h3
                if ch >= 128:
                    ch = -1
                i += 4
            else:
                return MALFORMED
            i += 2
        elif c < 32:
            return MALFORMED  # raw control characters are not allowed in JSON strings
        else:
            ch = c
            i += 1
        if out != NULL and out_len[0] <= cap:
            if ch < 0 or out_len[0] == cap:
                out_len[0] = cap + 1
            else:
                out[out_len[0]] = <unsigned char>ch
                out_len[0] += 1
    return RAN_OUT


cdef Py_ssize_t _skip_value(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """Skip the JSON value starting at p[i]; return the index after it, RAN_OUT or
    MALFORMED. Containers are skipped by depth counting, strings escape-aware; this is
    a skipper, not a validator (bracket kinds are not matched)."""
    cdef Py_ssize_t depth = 0, j, dummy
    cdef unsigned char c = p[i]
    if c == 34:
        return _read_string(p, n, i + 1, NULL, 0, &dummy)
    if c == 123 or c == 91:  # '{' '['
        # Invariant: depth counts the open containers between p[i] and p[j].
        j = i
        while j < n:
            c = p[j]
            if c == 34:
                j = _read_string(p, n, j + 1, NULL, 0, &dummy)
                if j < 0:
                    return j
                continue
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return RAN_OUT
    # A scalar: number, true, false, null. It ends at a separator or whitespace.
    j = i
    while j < n and not (p[j] == 44 or p[j] == 125 or p[j] == 93 or _is_ws(p[j])):
        if p[j] == 58 or p[j] == 34 or p[j] == 123 or p[j] == 91:
            return MALFORMED
        j += 1
    if j == i:
        return MALFORMED
    if j == n:
        return RAN_OUT
    return j


cdef enum:
    # What li_classify knows of a qualifier path (its qlen slot; >= 0 is the length of
    # the string found there, NAME_CAP + 1 when that string can match no value).
    Q_UNSEEN = -1     # the path's top-level key has not been met yet
    Q_NONE = -2       # met, and it holds no string: matches no value
    SETTLED = -3      # _read_inner: the value is known, and the caller decides now


cdef inline Py_ssize_t _skip_ws(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    while i < n and _is_ws(p[i]):
        i += 1
    return i


cdef Py_ssize_t _after_member(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                              bint *closed) noexcept nogil:
    """After an object member's value ending at p[i]: the index of the next key's quote
    (``*closed`` false; ``n`` when the bytes end first), the index after the object's
    ``}`` (``*closed`` true), RAN_OUT or MALFORMED."""
    i = _skip_ws(p, n, i)
    if i >= n:
        return RAN_OUT
    if p[i] == 44:  # ','
        i = _skip_ws(p, n, i + 1)
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
    MALFORMED."""
    cdef Py_ssize_t r
    if i >= n:
        return RAN_OUT
    if p[i] != 34:
        return MALFORMED
    r = _read_string(p, n, i + 1, key, NAME_CAP, klen)
    if r < 0:
        return r
    i = _skip_ws(p, n, r)
    if i >= n:
        return RAN_OUT
    if p[i] != 58:  # ':'
        return MALFORMED
    i = _skip_ws(p, n, i + 1)
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
    i = _skip_ws(p, n, i + 1)
    if i >= n:
        return RAN_OUT
    if p[i] == 125:
        return i + 1
    # Invariant: p[i] is where a member's key must begin; `found` says whether a member
    # named path.inner came before it (only the first one counts).
    while True:
        r = _member_value(p, n, i, key, &klen)
        if r < 0:
            return r
        i = r
        if not found and klen == path.inner_len and _bytes_eq(path.inner, key, klen):
            found = True
            if p[i] == 34:
                r = _read_string(p, n, i + 1, val, NAME_CAP, vlen)
                if r < 0:
                    return r
                if stop:
                    return SETTLED
                i = r
            else:
                vlen[0] = Q_NONE
                if stop:
                    return SETTLED
                r = _skip_value(p, n, i)
                if r < 0:
                    return r
                i = r
        else:
            r = _skip_value(p, n, i)
            if r < 0:
                return r
            i = r
        r = _after_member(p, n, i, &closed)
        if r < 0 or closed:
            return r
        i = r


cdef inline int _entry_of(const Dialect *d, const unsigned char *name, Py_ssize_t n) noexcept nogil:
    cdef int k
    if n > NAME_CAP:
        return -1
    for k in range(d.count):
        if d.entries[k].name_len == n and _bytes_eq(d.entries[k].name, name, n):
            return k
    return -1


cdef inline int _path_of(const Dialect *d, const unsigned char *key, Py_ssize_t n) noexcept nogil:
    """The qualifier path that begins with top-level key ``key`` (at most one does)."""
    cdef int k
    for k in range(d.path_count):
        if d.paths[k].key_len == n and _bytes_eq(d.paths[k].key, key, n):
            return k
    return -1


cdef inline uint8_t _qualified(const DialectEntry *e, const unsigned char *val,
                               Py_ssize_t vlen) noexcept nogil:
    """The kind of a line of qualified entry ``e`` whose path holds val[0:vlen]."""
    cdef int k
    if 0 <= vlen <= NAME_CAP:
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
    """
    cdef Py_ssize_t i = 0, r, klen, vlen
    cdef unsigned char key[NAME_CAP]
    cdef unsigned char val[NAME_CAP]
    cdef unsigned char qval[4][NAME_CAP]
    cdef Py_ssize_t qlen[4]
    cdef int k, e, want = -1
    cdef bint typed = False, stop, closed = False
    for k in range(4):
        qlen[k] = Q_UNSEEN
    if at_file_start and n >= 3 and p[0] == 0xEF and p[1] == 0xBB and p[2] == 0xBF:
        i = 3  # a UTF-8 byte-order mark at byte 0 is tolerated, never part of a record
    i = _skip_ws(p, n, i)
    if i == n:
        return KIND_BLANK if whole else KIND_UNDECIDED
    if p[i] != 123 or last_sig != 125:  # must look like {...}
        return KIND_CORRUPT
    i = _skip_ws(p, n, i + 1)
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
        if not typed and klen == 4 and key[0] == 116 and key[1] == 121 and key[2] == 112 and key[3] == 101:
            typed = True
            if p[i] != 34:
                return KIND_OTHER  # "type" is not a string: not a record we know
            r = _read_string(p, n, i + 1, val, NAME_CAP, &vlen)
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
            want = e
            i = r
        else:
            k = _path_of(d, key, klen)
            if k >= 0 and qlen[k] == Q_UNSEEN:
                stop = want >= 0 and d.entries[want].path == k
                if d.paths[k].inner_len == 0 and p[i] == 34:
                    r = _read_string(p, n, i + 1, qval[k], NAME_CAP, &qlen[k])
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
                    r = _skip_value(p, n, i)
            else:
                r = _skip_value(p, n, i)
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


cdef inline bint _bytes_eq(const char *a, const unsigned char *b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        if <unsigned char>a[k] != b[k]:
            return False
    return True


cdef inline int _last_sig(const unsigned char *p, Py_ssize_t n, int prev) noexcept nogil:
    """Last non-whitespace byte of p[0:n], or ``prev`` when there is none."""
    while n > 0:
        n -= 1
        if not _is_ws(p[n]):
            return p[n]
    return prev


cdef int _push(LineBuf *out, int64_t start, uint8_t kind) noexcept nogil:
    """Append one line; 0 on success, -1 when memory runs out (nothing is changed)."""
    cdef Py_ssize_t cap
    cdef int64_t *s
    cdef uint8_t *k
    if out.count == out.cap:
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
        nl = <const unsigned char *>memchr(buf + p, 10, n - p)
        if nl == NULL:
            st.in_line = 1
            st.line_start = off + p
            st.line_len = n - p
            st.pre_len = min(n - p, st.window)
            memcpy(st.pre, buf + p, st.pre_len)
            st.last_sig = _last_sig(buf + p, n - p, -1)
            return 0
        length = nl - (buf + p)
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


cdef object _result(LineBuf *out, ScanState *st, int64_t scanned_end, int64_t start):
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
    if window < 1:
        raise ValueError(f"classify_window must be >= 1, got {window}")
    if _state_init(st, out, window) < 0:
        raise MemoryError()
    return 0


cdef void _release(ScanState *st, LineBuf *out) noexcept nogil:
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
    if base_offset < 0 or base_offset > (1 << 62) - n:
        raise ValueError(f"base_offset must be in 0..2**62 - len(data), got {base_offset}")
    _init(&st, &out, classify_window)
    try:
        with nogil:
            rc = _scan_block(&st, &out, &data[0] if n else NULL, n, base_offset, &dialect.c_dialect)
        if rc < 0:
            raise MemoryError()
        return _result(&out, &st, base_offset + n, base_offset)
    finally:
        _release(&st, &out)


cdef struct Prefetch:
    # Two blocks in flight: a reader thread fills one with pread while the scanning
    # thread scans the other, so the kernel's copy and the scan overlap.
    int fd
    unsigned char *buf[2]
    ssize_t got[2]          # bytes read into each slot; 0 = end of range, -1 = error
    int err[2]
    int full[2]             # 1 while a slot holds data the scanner has not consumed
    long long pos           # next offset the reader reads
    long long end           # -1: read to end of file
    size_t block
    int stop                # set by the scanner to make the reader return
    pthread_mutex_t mu
    pthread_cond_t cv


cdef void _prefetch_once(Prefetch *pf) noexcept nogil:
    """Without a reader thread: fill slot 0 with the (only) block and slot 1 with the
    end of the range, which is all the scan loop will ask for."""
    cdef ssize_t got = 0
    cdef size_t want = <size_t>(pf.end - pf.pos)
    pf.err[0] = 0
    if want:
        got = pread(pf.fd, pf.buf[0], want, pf.pos)
        while got < 0 and errno == EINTR:
            got = pread(pf.fd, pf.buf[0], want, pf.pos)
        if got < 0:
            pf.err[0] = errno
    pf.got[0] = got
    pf.full[0] = 1
    pf.got[1] = 0
    pf.err[1] = 0
    pf.full[1] = 1


cdef void *_prefetch_main(void *arg) noexcept nogil:
    """Reader thread: fill slots 0, 1, 0, ... until end of range, an error, or stop."""
    cdef Prefetch *pf = <Prefetch *>arg
    cdef int slot = 0, e
    cdef ssize_t got
    cdef size_t want
    while True:
        pthread_mutex_lock(&pf.mu)
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
            got = pread(pf.fd, pf.buf[slot], want, pf.pos)
            while got < 0 and errno == EINTR:
                got = pread(pf.fd, pf.buf[slot], want, pf.pos)
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
            return NULL
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
    int slot
    int direct              # 1: read each block in the scanning thread (no reader thread)
    int err                 # errno of a failed read, else 0
    int nomem
    pthread_t reader
    int reader_started
    int opened
    int stop                # atomic: set by the caller to abandon a worker's scan
    pthread_t worker
    int worker_started


cdef unsigned char *_read_buffers(size_t block) noexcept nogil:
    """Both slots of a part, ``2 * block`` bytes in one allocation, aligned so the
    kernel may back them with huge pages (asked for, where it is ``madvise``-only). The
    kernel's copy into them is most of a scan's time, and into 4 KiB pages fresh from
    ``mmap`` it was measured ~30% slower (a TLB miss every 4 KiB written)."""
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
    while not pf.full[slot]:
        pthread_cond_wait(&pf.cv, &pf.mu)
    got = pf.got[slot]
    pt.err = pf.err[slot]
    pthread_mutex_unlock(&pf.mu)
    if got <= 0:
        return 0  # end of range, end of file (the file may have shrunk) or an error
    rc = _scan_block(&pt.st, &pt.out, pf.buf[slot], got, pt.pos, pt.d)
    pthread_mutex_lock(&pf.mu)
    pf.full[slot] = 0  # hand the slot back to the reader
    pthread_cond_broadcast(&pf.cv)
    pthread_mutex_unlock(&pf.mu)
    if rc < 0:
        pt.nomem = 1
        return 0
    _atomic_store(&pt.pos, pt.pos + got)
    pt.slot = slot ^ 1
    return 1


cdef int _part_step_direct(Part *pt) noexcept nogil:
    """``_part_step`` reading the block in this thread."""
    cdef Prefetch *pf = &pt.pf
    cdef ssize_t got
    cdef size_t want
    if pt.end != -1 and pt.pos >= pt.end:
        return 0
    want = pf.block if pt.end == -1 else <size_t>min(<long long>pf.block, pt.end - pt.pos)
    got = pread(pf.fd, pf.buf[0], want, pt.pos)
    while got < 0 and errno == EINTR:
        got = pread(pf.fd, pf.buf[0], want, pt.pos)
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
    """Worker thread: scan one part to its end (or until told to stop)."""
    cdef Part *pt = <Part *>arg
    while not _atomic_load_int(&pt.stop) and _part_step(pt):
        pass
    return NULL


cdef void _part_close(Part *pt) noexcept nogil:
    """Stop and join the part's threads and free its buffers (not its output)."""
    if not pt.opened:
        return
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
    # Invariant: no "\\n" lies in [pos - 1, at).
    while at < limit:
        got = pread(fd, buf, <size_t>min(<long long>sizeof(buf), limit - at), at)
        while got < 0 and errno == EINTR:
            got = pread(fd, buf, <size_t>min(<long long>sizeof(buf), limit - at), at)
        if got <= 0:
            return -1
        nl = <const unsigned char *>memchr(buf, 10, got)
        if nl != NULL:
            return at + (nl - buf) + 1
        at += got
    return -1


cdef object _joined_result(Part *parts, int n, long long start):
    """One ScanResult from the parts, in order. A part other than the last that ended
    short of its end, or inside a line, means the file changed under the scan: the
    result stops there, as a scan that met the end of the file would."""
    cdef int k, last = n - 1
    cdef Py_ssize_t total = 0, at = 0
    cdef bytes starts, kinds
    for k in range(n):
        if parts[k].err:
            raise OSError(parts[k].err, strerror(parts[k].err).decode("utf-8", "replace"))
        if parts[k].nomem:
            raise MemoryError()
    for k in range(n - 1):
        if parts[k].pos != parts[k].end or parts[k].st.in_line:
            last = k
            break
    if last == 0:
        return _result(&parts[0].out, &parts[0].st, parts[0].pos, start)
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
    cuts[0] = start
    if threads > 1:
        span = (end if end != -1 else os.fstat(fd).st_size) - start
        if span >= 2 * min_part:
            threads = <int>min(<long long>threads, span // min_part)
            prev = start
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
            raise OSError(err, "cannot start a scan thread: " + strerror(err).decode("utf-8", "replace"))
        while more:
            with nogil:
                more = _part_step(&parts[0])
            if more and progress is not None:
                done = 0
                for k in range(n):
                    done += _atomic_load(&parts[k].pos) - parts[k].start
                progress(done)
        with nogil:
            for k in range(1, n):
                if parts[k].worker_started:
                    pthread_join(parts[k].worker, NULL)
                    parts[k].worker_started = 0
        if n > 1 and progress is not None:
            done = 0
            for k in range(n):
                done += parts[k].pos - parts[k].start
            progress(done)
        return _joined_result(parts, n, start)
    finally:
        with nogil:
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
    with nogil:
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


def escape_line_separators(data not None):
    """Replace raw U+2028 and U+2029 (UTF-8 ``E2 80 A8`` / ``E2 80 A9``) with the JSON
    escapes ``\\u2028`` / ``\\u2029``.

    Some readers split lines on them; in encoded JSON they can only sit inside strings,
    so the escape keeps a record one line for every reader without changing its value.
    One ``memchr`` pass; returns ``data`` itself when there is nothing to escape.
    """
    cdef const unsigned char[::1] v = data
    cdef Py_ssize_t n = v.shape[0], i = 0, hits = 0, o = 0
    cdef const unsigned char *p = &v[0] if n else NULL
    cdef const unsigned char *q
    cdef bytearray out
    cdef unsigned char *w
    with nogil:
        # memchr for the lead byte: near free on ASCII text; text dense with other
        # E2 80 xx punctuation (dashes, curly quotes) costs about 1 ms per MB here.
        # Invariant: every separator before p + i has been counted.
        while i + 2 < n:
            q = <const unsigned char *>memchr(p + i, 0xE2, n - i - 2)
            if q == NULL:
                break
            i = q - p
            if p[i + 1] == 0x80 and (p[i + 2] == 0xA8 or p[i + 2] == 0xA9):
                hits += 1
                i += 3
            else:
                i += 1
    if hits == 0:
        return data
    out = bytearray(n + 3 * hits)  # 3 bytes become 6
    w = out
    i = 0
    with nogil:
        while i < n:
            if i + 2 < n and p[i] == 0xE2 and p[i + 1] == 0x80 and (p[i + 2] == 0xA8 or p[i + 2] == 0xA9):
                memcpy(w + o, b"\\u202", 5)
                w[o + 5] = 56 if p[i + 2] == 0xA8 else 57  # '8' or '9'
                o += 6
                i += 3
            else:
                w[o] = p[i]
                o += 1
                i += 1
    return bytes(out)


# ---------------------------------------------------------------------------
# Bounded display projection
# ---------------------------------------------------------------------------

cdef enum PState:
    P_VALUE = 0            # a value must come next
    P_VALUE_OR_CLOSE = 1   # just after '[': a value or ']'
    P_KEY = 2              # just after ',' in an object: a key
    P_KEY_OR_CLOSE = 3     # just after '{': a key or '}'
    P_COLON = 4
    P_COMMA_OR_CLOSE = 5
    P_DONE = 6


cdef inline Py_ssize_t _utf8_len(unsigned char c) noexcept nogil:
    if c < 0x80:
        return 1
    if c >= 0xF0:
        return 4
    if c >= 0xE0:
        return 3
    if c >= 0xC0:
        return 2
    return 1  # a stray continuation byte: copied alone; the decoder will flag it


cdef inline bint _valid_escape(const unsigned char *e) noexcept nogil:
    """Whether the escape at e[0] == '\\' is valid JSON (its bytes are all present)."""
    cdef unsigned char c = e[1]
    if c == 117:
        return (_hexval(e[2]) >= 0 and _hexval(e[3]) >= 0 and _hexval(e[4]) >= 0
                and _hexval(e[5]) >= 0)
    return (c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110
            or c == 114 or c == 116)


cdef inline int _surrogate(const unsigned char *e) noexcept nogil:
    """For a \\uXXXX escape at e (six bytes present): 1 for a high surrogate
    (D800-DBFF), 2 for a low one (DC00-DFFF), 0 otherwise."""
    cdef int h0 = _hexval(e[2]), h1 = _hexval(e[3]), h2 = _hexval(e[4]), h3 = _hexval(e[5])
    if h0 != 13 or h1 < 8 or h2 < 0 or h3 < 0:
        return 0
    return 1 if h1 < 12 else 2


cdef inline bint _valid_continuation(const unsigned char *p, Py_ssize_t u) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(1, u):
        if p[k] < 0x80 or p[k] > 0xBF:
            return False
    return True


def project_display(const unsigned char[::1] prefix not None, long long total_len,
                    Py_ssize_t content_limit):
    """Build the display form of one JSON line from a prefix of it.

    Copies the line's structure, keys, scalars and short string values (at most
    128 bytes as written: ids, roles, timestamps), and at most ``content_limit`` bytes
    (as written, escapes included) of its longer string values: the text. Where text is cut, the cut string
    ends with a marker ``" [... N more bytes not shown]"`` and every open container is
    closed, so the result is valid JSON. Bytes past ``prefix`` are never needed.

    Parameters
    ----------
    prefix : bytes-like
        The first bytes of the line, without its ``\\n`` (and without a byte-order mark).
    total_len : int
        Length of the whole line, for the marker.
    content_limit : int
        String-value bytes to keep, >= 0.

    Returns
    -------
    tuple of (bytes or None, int, int)
        ``(display, kept, cut)``: the display JSON (None when the prefix is not JSON,
        or holds nothing complete to show), bytes of long string values kept, and bytes
        of the line not represented (0 when whole).
    """
    cdef const unsigned char *p = &prefix[0] if prefix.shape[0] else NULL
    cdef Py_ssize_t n = prefix.shape[0]
    cdef unsigned char *out
    cdef unsigned char stack[MAX_DEPTH]
    cdef Py_ssize_t depth = 0, i = 0, o = 0, j, u, budget = content_limit, kept = 0
    cdef Py_ssize_t safe_o = 0, safe_depth = 0, safe_src = 0
    cdef PState state = P_VALUE
    cdef bint malformed = False, cut = False, in_text = False, cut_by_end = False
    cdef unsigned char c
    cdef bytes marker, result
    if content_limit < 0:
        raise ValueError(f"content_limit must be >= 0, got {content_limit}")
    if total_len < n:
        raise ValueError(f"total_len ({total_len}) is shorter than the prefix ({n})")
    out = <unsigned char *>malloc(n + MAX_DEPTH + 2)
    if out == NULL:
        raise MemoryError()
    try:
        with nogil:
            # Invariant: out[0:o] is the projection of p[0:i]; out[0:safe_o] followed by
            # closers for stack[0:safe_depth] is valid JSON representing p[0:safe_src].
            while i < n and not malformed and not cut:
                c = p[i]
                if _is_ws(c):
                    i += 1
                    continue
                if state == P_DONE:
                    malformed = True
                elif state == P_COLON:
                    if c != 58:
                        malformed = True
                    else:
                        out[o] = c; o += 1; i += 1
                        state = P_VALUE
                elif state == P_COMMA_OR_CLOSE:
                    if c == 44:
                        out[o] = c; o += 1; i += 1
                        state = P_KEY if stack[depth - 1] == 123 else P_VALUE
                    elif (c == 125 and stack[depth - 1] == 123) or (c == 93 and stack[depth - 1] == 91):
                        out[o] = c; o += 1; i += 1
                        depth -= 1
                        state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                        safe_o = o; safe_depth = depth; safe_src = i
                    else:
                        malformed = True
                elif c == 125 and state == P_KEY_OR_CLOSE:
                    out[o] = c; o += 1; i += 1
                    depth -= 1
                    state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                    safe_o = o; safe_depth = depth; safe_src = i
                elif c == 93 and state == P_VALUE_OR_CLOSE:
                    out[o] = c; o += 1; i += 1
                    depth -= 1
                    state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                    safe_o = o; safe_depth = depth; safe_src = i
                elif state == P_KEY or state == P_KEY_OR_CLOSE:
                    # A key is copied whole and is not text content; a key the prefix
                    # cuts short is dropped by rolling back to the last safe point.
                    if c != 34:
                        malformed = True
                    else:
                        j = _read_string(p, n, i + 1, NULL, 0, &u)
                        if j == MALFORMED:
                            malformed = True
                        elif j == RAN_OUT:
                            cut = True
                        else:
                            memcpy(out + o, p + i, j - i); o += j - i; i = j
                            state = P_COLON
                elif c == 123 or c == 91:
                    if depth == MAX_DEPTH:
                        malformed = True
                    else:
                        stack[depth] = c
                        depth += 1
                        out[o] = c; o += 1; i += 1
                        state = P_KEY_OR_CLOSE if c == 123 else P_VALUE_OR_CLOSE
                        safe_o = o; safe_depth = depth; safe_src = i
                elif c == 34:
                    # A short string value (ids, roles, timestamps, type names) is
                    # metadata: copied whole, outside the budget. Looking ahead only
                    # SHORT_STRING bytes keeps this O(1) on a multi-megabyte string.
                    j = _read_string(p, min(n, i + 2 + SHORT_STRING), i + 1, NULL, 0, &u)
                    if j == MALFORMED:
                        malformed = True
                    elif j > 0:
                        memcpy(out + o, p + i, j - i); o += j - i; i = j
                        state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                        safe_o = o; safe_depth = depth; safe_src = i
                    else:
                        # Text content: copied under the budget one whole character or
                        # escape at a time, so a cut never splits either.
                        out[o] = 34; o += 1
                        j = i + 1
                        while True:
                            # Fast path: a run of plain ASCII text is copied with one
                            # memcpy (every byte is a whole character, none is special).
                            u = j
                            while u < n and u - j < budget and 32 <= p[u] < 128 and p[u] != 34 and p[u] != 92:
                                u += 1
                            if u > j:
                                memcpy(out + o, p + j, u - j); o += u - j
                                budget -= u - j; kept += u - j; j = u
                            if j >= n:
                                cut = True; in_text = True; cut_by_end = True
                                break
                            c = p[j]
                            if c == 34:
                                break
                            if c == 92:
                                u = 6 if (j + 1 < n and p[j + 1] == 117) else 2
                            elif c < 32:
                                malformed = True
                                break
                            else:
                                u = _utf8_len(c)
                            if j + u > n:
                                cut = True; in_text = True; cut_by_end = True
                                break
                            if c == 92:
                                if not _valid_escape(p + j):
                                    malformed = True
                                    break
                                if u == 6 and _surrogate(p + j) == 1:
                                    # A high surrogate and its low half are one character:
                                    # never cut between them (the half alone is not JSON
                                    # any decoder accepts).
                                    if j + 12 > n:
                                        cut = True; in_text = True; cut_by_end = True
                                        break
                                    if p[j + 6] == 92 and p[j + 7] == 117 and _surrogate(p + j + 6) == 2:
                                        u = 12
                            elif u > 1 and not _valid_continuation(p + j, u):
                                u = 1  # invalid UTF-8: one byte alone, never the quote after it
                            if u > budget:
                                cut = True; in_text = True
                                break
                            memcpy(out + o, p + j, u); o += u; j += u
                            budget -= u; kept += u
                        if not malformed:
                            i = j + 1 if not cut else j
                            if not cut:
                                out[o] = 34; o += 1
                                state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                                safe_o = o; safe_depth = depth; safe_src = i
                else:
                    # A scalar (number, true, false, null): copied whole or not at all.
                    j = i
                    while j < n and not (p[j] == 44 or p[j] == 125 or p[j] == 93 or _is_ws(p[j])):
                        if p[j] == 58 or p[j] == 34 or p[j] == 123 or p[j] == 91:
                            malformed = True
                            break
                        j += 1
                    if j == i:
                        malformed = True  # e.g. ',' or '}' where a value belongs
                    if not malformed:
                        if j == n and total_len > n:
                            cut = True  # the scalar may go on past the prefix
                        else:
                            memcpy(out + o, p + i, j - i); o += j - i; i = j
                            state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                            safe_o = o; safe_depth = depth; safe_src = i
        if malformed:
            return (None, kept, total_len)
        if not cut and state != P_DONE:
            if total_len > n:
                cut = True  # the prefix ended between tokens
            else:
                return (None, kept, total_len)  # the whole line ends early: not JSON
        if not cut:
            return (PyBytes_FromStringAndSize(<char *>out, o), kept, 0)
        if total_len == n and (cut_by_end or not in_text):
            return (None, kept, total_len)  # the whole line ends inside a key or string
        if not in_text and safe_o == 0:
            return (None, kept, total_len)  # nothing complete to show yet
        if in_text:
            # Close the cut string with the marker; it is then a complete value.
            marker = f" [... {total_len - i} more bytes not shown]\"".encode("ascii")
            result = PyBytes_FromStringAndSize(<char *>out, o) + marker
            safe_depth = depth
            safe_src = i
        else:
            result = PyBytes_FromStringAndSize(<char *>out, safe_o)
        closers = bytearray(safe_depth)
        for j in range(safe_depth):
            closers[j] = 125 if stack[safe_depth - 1 - j] == 123 else 93
        return (result + bytes(closers), kept, total_len - safe_src)
    finally:
        free(out)
