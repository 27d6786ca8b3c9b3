"""The tree a transcript's entries make: each line's links, read from its raw bytes, and
where each line hangs, resolved into arrays a window walks.

Agents that keep sessions as trees (Claude Code's ``uuid``/``parentUuid``, pi's
``id``/``parentId``) append every entry in order and name its parent; a rewind starts a
new child of an older entry and leaves the old branch in the file. A reader that walks
the file in order shows abandoned branches as current. This module gives each line:

- its **links** (:func:`line_links`): 64-bit hashes of the decoded string values of the
  top-level keys a dialect names as the entry's own id, its parent, its logical parent
  (Claude Code's compaction boundary, whose ``parentUuid`` is null) and the entry whose
  tool call it answers (Claude Code's ``sourceToolAssistantUUID``). A slot is ``LINK_ABSENT``
  when the key is absent or holds neither a string nor null, ``LINK_NULL`` for null, else the
  hash (never below 2). A line that is not one JSON object has no links at all.
- its **place** (:class:`LineTree`): the line it hangs on (``up``), resolved by these
  rules, which the slow twin ``tests/reference/linetree.py`` states plainly:

  1. A line whose own id an earlier line already had is a replayed copy (``COPY``): it is
     read once, as the earlier line, and hangs nowhere.
  2. A named parent that some earlier line has is where the line hangs (for a null
     parent, the logical parent, when one is named and some earlier line has it).
  3. Otherwise (no parent key, a parent no earlier line has, a null parent) the line
     hangs on the line before it: the newest earlier line that is not a copy, or nothing
     (``ROOT``) for the first. A list is a tree in which every line hangs on the one
     before, so files without parents read as they always have; a broken chain loses
     nothing; and a null parent in the middle of a file (a writer that lost track of its
     leaf) continues the file instead of hiding everything before it. A tree has one
     root, its first line.
  4. A tool result that names as its source the very entry it hangs on (a parallel
     call's result, written as a child of its call while the chain went on through the
     next call) hangs instead on the newest earlier line that descends from that entry,
     searched at most ``FANOUT_SPAN`` lines back, so the fan-out stays on the branch.

  and, from ``up``: ``pos`` (the messages above the line on its branch: a message's
  stable index on any branch through it), ``tip`` (the nearest message at or above it)
  and ``comp`` (the nearest compaction at or above it). A tree whose lines each hang on
  the line before (:func:`hangs_as_chain`) needs none of them made (decision 0053).

Nothing here decodes JSON into Python objects; the lexer is ``jsonlex.pxd``'s.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset
from posix.mman cimport MADV_HUGEPAGE, MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, PROT_READ, PROT_WRITE, madvise, mmap, munmap

from boundctx._native.lineindex cimport KIND_COMPACTION, KIND_CORRUPT, KIND_MESSAGE
from boundctx._native.jsonlex cimport (MALFORMED, RAN_OUT, hexval, is_ws, scan_scalar, skip_container,
                                       skip_string_unchecked, skip_value, skip_ws)

cdef enum:
    _SLOTS = LINK_SLOTS
    _ABSENT = 0
    _NULL = 1
    _ROOT = -1
    _COPY = -3
    _FANOUT_SPAN = 4096

# Line numbers stay far below int64's end, so sums of them never wrap.
cdef int64_t _MAX_LINE = 1LL << 62

#: Link slots, in the order each line's four links are stored.
SLOT_ID = 0
SLOT_PARENT = 1
SLOT_LOGICAL = 2
SLOT_SOURCE = 3
SLOTS = _SLOTS
#: A slot's key is absent (or holds neither a string nor null).
LINK_ABSENT = _ABSENT
#: A slot's key holds null.
LINK_NULL = _NULL
#: ``up`` of a root, of a replayed copy.
ROOT = _ROOT
COPY = _COPY
#: How far back a parallel call's result looks for the newest line below its call.
FANOUT_SPAN = _FANOUT_SPAN
#: A line longer than this (its newline included) is not read for its links.
LONGEST_LINKED_LINE = LONGEST_LINKED

cdef extern from "boundctx/_native/linewalk_simd.h":
    enum:
        BX_MORE
        BX_SIMD_BUILT
    int bx_cpu_has_avx2() noexcept nogil
    Py_ssize_t bx_key_stop32(const unsigned char *p, Py_ssize_t i) noexcept nogil
    Py_ssize_t bx_skip_container64(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                                   Py_ssize_t *at, Py_ssize_t *depth) noexcept nogil

# Whether the link walk takes its AVX2 paths: chosen once, here, from what the CPU has;
# use_simd() turns them off (and on again) so the tests hold both paths to the twin.
cdef bint _simd_ok = BX_SIMD_BUILT and bx_cpu_has_avx2()
cdef bint _simd = _simd_ok

#: Whether this build and CPU have the AVX2 walk (use_simd can only turn it on then).
SIMD_AVAILABLE = bool(_simd_ok)


def use_simd(bint on):
    """Take the AVX2 paths of the link walk (when the CPU has them) or the scalar ones
    only; returns whether the AVX2 paths were taken before. For tests and measurements:
    both give the same links on any bytes. Not to be called while a scan runs."""
    global _simd
    cdef bint before = _simd
    _simd = on and _simd_ok
    return before


cdef uint64_t FNV_OFFSET = 14695981039346656037ULL
cdef uint64_t FNV_PRIME = 1099511628211ULL

# 1 for the bytes that stand for themselves inside a JSON string (all but a quote, a
# backslash and the control characters): the byte loops below ask this one question
# of nearly every byte, a load whose answer is nearly always yes. The range tests it
# replaced mispredicted on ids that mix digits and letters (a UUID's hex), about one
# byte in three.
cdef unsigned char _PLAIN[256]
for _c in range(256):
    _PLAIN[_c] = 0 if (_c < 32 or _c == 34 or _c == 92) else 1
del _c


# -- links ------------------------------------------------------------------------------

cdef inline uint64_t _fnv(uint64_t h, unsigned int c) noexcept nogil:
    return (h ^ c) * FNV_PRIME


cdef inline uint64_t _fnv_code_point(uint64_t h, unsigned int cp) noexcept nogil:
    """Hash one code point as UTF-8 (a lone surrogate as its three bytes, as Python's
    ``surrogatepass`` writes it), so an escaped id hashes as its decoded text."""
    if cp < 0x80:
        return _fnv(h, cp)
    if cp < 0x800:
        h = _fnv(h, 0xC0 | (cp >> 6))
        return _fnv(h, 0x80 | (cp & 0x3F))
    if cp < 0x10000:
        h = _fnv(h, 0xE0 | (cp >> 12))
        h = _fnv(h, 0x80 | ((cp >> 6) & 0x3F))
        return _fnv(h, 0x80 | (cp & 0x3F))
    h = _fnv(h, 0xF0 | (cp >> 18))
    h = _fnv(h, 0x80 | ((cp >> 12) & 0x3F))
    h = _fnv(h, 0x80 | ((cp >> 6) & 0x3F))
    return _fnv(h, 0x80 | (cp & 0x3F))


cdef inline int _hex4(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """The value of the four hex digits at p[i:i+4]; RAN_OUT or MALFORMED."""
    cdef int a, b, c, d
    if i + 4 > n:
        return RAN_OUT
    a = hexval(p[i]); b = hexval(p[i + 1]); c = hexval(p[i + 2]); d = hexval(p[i + 3])
    if a < 0 or b < 0 or c < 0 or d < 0:
        return MALFORMED
    return (a << 12) | (b << 8) | (c << 4) | d


cdef Py_ssize_t _hash_string(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                             uint64_t *out) noexcept nogil:
    """Hash the decoded text of the JSON string whose opening quote is at p[i-1] (FNV-1a
    over its UTF-8); return the index after the closing quote, RAN_OUT or MALFORMED."""
    cdef uint64_t h = FNV_OFFSET
    cdef unsigned char c, e
    cdef int cp, low
    # Invariant: h is the hash of the decoding of p[i0:i], whole characters and escapes.
    while i < n:
        c = p[i]
        if _PLAIN[c]:
            # Neither a quote, a backslash nor a control character: ids are made of these.
            h = _fnv(h, c)
            i += 1
            continue
        if c == 34:  # '"'
            out[0] = h
            return i + 1
        if c == 92:  # '\\'
            if i + 1 >= n:
                return RAN_OUT
            e = p[i + 1]
            if e == 117:  # \uXXXX, a surrogate pair joined as one code point
                cp = _hex4(p, n, i + 2)
                if cp < 0:
                    return cp
                i += 6
                if 0xD800 <= cp < 0xDC00 and i + 1 < n and p[i] == 92 and p[i + 1] == 117:
                    low = _hex4(p, n, i + 2)
                    if 0xDC00 <= low < 0xE000:
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                h = _fnv_code_point(h, <unsigned int>cp)
                continue
            if e == 34 or e == 92 or e == 47:
                h = _fnv(h, e)
            elif e == 98:
                h = _fnv(h, 8)
            elif e == 102:
                h = _fnv(h, 12)
            elif e == 110:
                h = _fnv(h, 10)
            elif e == 114:
                h = _fnv(h, 13)
            elif e == 116:
                h = _fnv(h, 9)
            else:
                return MALFORMED
            i += 2
        else:
            return MALFORMED  # a control character
    return RAN_OUT


cdef inline Py_ssize_t _key_slot(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                                 const KeyTable *t, int *slot) noexcept nogil:
    """Read the key whose opening quote is at p[i-1], in place: the index after its
    closing quote (RAN_OUT, MALFORMED), and in ``*slot`` the slot its name fills, or -1.
    A key with an escape never equals a dialect's plain name (it is read past,
    unmatched), nor does one longer than KEY_CAP."""
    cdef Py_ssize_t j = i
    cdef unsigned char c
    cdef bint plain = True
    if _simd and i + 32 <= n:
        # The first byte that stops the byte loop below, 32 at a time: a key's closing
        # quote, nearly always. Anything else (an escape, a control character, a key of
        # 32 bytes or more) goes the byte loop's way from the start.
        j = bx_key_stop32(p, i)
        if j < 32 and p[i + j] == 34:
            slot[0] = _slot_of(t, p + i, j)
            return i + j + 1
        j = i
    # Invariant: p[i:j] is whole characters and escapes of the key, none its closing
    # quote. Most key bytes are letters and digits: one table look-up each.
    while j < n:
        c = p[j]
        if _PLAIN[c]:
            j += 1
            continue
        if c == 34:
            slot[0] = _slot_of(t, p + i, j - i) if plain else -1
            return j + 1
        if c == 92:
            if j + 1 >= n:
                return RAN_OUT
            plain = False
            j += 2
            continue
        return MALFORMED  # a control character
    return RAN_OUT


# KeyTable (the link keys, as _fill_keys copies them in) is declared in linetree.pxd.


cdef inline int _slot_of(const KeyTable *t, const unsigned char *key, Py_ssize_t klen) noexcept nogil:
    """The slot of the key named by key[0:klen], or -1. Most top-level keys of a line
    are no link key's length, and are turned away by one bit test."""
    cdef int k
    cdef Py_ssize_t j
    if klen > KEY_CAP or not (t.lengths >> klen) & 1:
        return -1
    for k in range(t.count):
        if t.length[k] != klen:
            continue
        # A byte loop, not memcmp: names are a few bytes, and a call costs more.
        for j in range(klen):
            if t.name[k][j] != key[j]:
                break
        else:
            return t.slot[k]
    return -1


cdef inline Py_ssize_t _skip_value(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """skip_value(p, n, i, False), a container (a line's ``message``) walked 64 bytes at
    a time when the AVX2 paths are on. A string value keeps memchr: a 32-byte probe for
    its end first was measured no faster."""
    cdef Py_ssize_t r, at, depth
    cdef unsigned char c = p[i]
    if _simd and (c == 123 or c == 91):
        r = bx_skip_container64(p, n, i, &at, &depth)
        if r != BX_MORE:
            return r
        return skip_container(p, n, at, depth, False)
    return skip_value(p, n, i, False)


cdef void _links_of_line(const unsigned char *p, Py_ssize_t n, const KeyTable *t,
                         uint64_t *out) noexcept nogil:
    """The four links of one line (p[0:n], without its newline). Where a key appears
    twice, the last one counts, as a JSON parser keeps it."""
    cdef Py_ssize_t i, r
    cdef int slot
    cdef uint64_t h
    cdef uint64_t found[4]
    found[0] = _ABSENT; found[1] = _ABSENT; found[2] = _ABSENT; found[3] = _ABSENT
    out[0] = _ABSENT; out[1] = _ABSENT; out[2] = _ABSENT; out[3] = _ABSENT
    i = 0
    if n >= 3 and p[0] == 0xEF and p[1] == 0xBB and p[2] == 0xBF:
        i = 3  # a byte-order mark, which readers skip
    i = skip_ws(p, n, i)
    if i >= n or p[i] != 123:
        return
    i = skip_ws(p, n, i + 1)
    if i < n and p[i] == 125:
        i += 1
    else:
        while True:
            if i >= n or p[i] != 34:
                return
            r = _key_slot(p, n, i + 1, t, &slot)
            if r < 0:
                return
            i = skip_ws(p, n, r)
            if i >= n or p[i] != 58:
                return
            i = skip_ws(p, n, i + 1)
            if i >= n:
                return
            if slot >= 0 and p[i] == 34:
                r = _hash_string(p, n, i + 1, &h)
                if r < 0:
                    return
                found[slot] = h if h >= 2 else h + 2
                i = r
            else:
                # A scalar that runs to the line's end (RAN_OUT) has no "}" after it:
                # not an object either way.
                r = _skip_value(p, n, i)
                if r < 0:
                    return
                if slot >= 0:
                    found[slot] = _NULL if (r - i == 4 and p[i] == 110 and p[i + 1] == 117
                                           and p[i + 2] == 108 and p[i + 3] == 108) else _ABSENT
                i = r
            i = skip_ws(p, n, i)
            if i >= n:
                return
            if p[i] == 44:
                i = skip_ws(p, n, i + 1)
                continue
            if p[i] == 125:
                i += 1
                break
            return
    i = skip_ws(p, n, i)
    if i != n:
        return  # something after the object: not one record
    out[0] = found[0]; out[1] = found[1]; out[2] = found[2]; out[3] = found[3]


cdef int _fill_keys(KeyTable *t, keys) except -1:
    cdef bytes name
    cdef int slot
    t.count = 0
    t.lengths = 0
    for name, slot in keys:
        if t.count >= MAX_KEYS:
            raise ValueError(f"at most {MAX_KEYS} link keys")
        if not 0 < len(name) <= KEY_CAP:
            raise ValueError(f"a link key is 1..{KEY_CAP} bytes, not {name!r}")
        if not 0 <= slot < _SLOTS:
            raise ValueError(f"no link slot {slot}")
        if b"\\" in name or b'"' in name:
            raise ValueError(f"a link key is plain text, not {name!r}")
        t.slot[t.count] = slot
        t.length[t.count] = len(name)
        t.lengths |= 1ULL << len(name)
        memcpy(t.name[t.count], <const char *>name, len(name))
        t.count += 1
    return 0


def line_links(const unsigned char[::1] data, const int64_t[::1] starts, Py_ssize_t first,
               Py_ssize_t count, int64_t end, int64_t base, keys):
    """The links of lines ``first...first + count - 1``, line ``k`` being the bytes from
    ``starts[k]`` to the next line's start (``end`` for the last line there is), with
    ``data[0]`` at file offset ``base``: ``4 * count`` little-endian uint64, line by line
    in slot order.

    ``keys`` is a sequence of ``(name: bytes, slot: int)``: the top-level keys whose
    values fill each slot (several names may fill one slot; the last present wins)."""
    cdef KeyTable t
    cdef Py_ssize_t k, size = data.shape[0], nstarts = starts.shape[0]
    cdef int64_t s, e
    cdef uint64_t *out
    cdef bytes result
    if first < 0 or count < 0 or first + count > nstarts:
        raise ValueError(f"lines {first}..{first + count - 1} are not among the {nstarts} given")
    _fill_keys(&t, keys)
    for k in range(first, first + count):
        s = starts[k] - base
        e = (starts[k + 1] if k + 1 < nstarts else end) - base
        if not 0 <= s <= e <= size:
            raise ValueError(f"line {k} ({s + base}..{e + base}) is outside the bytes given")
    result = PyBytes_FromStringAndSize(NULL, count * _SLOTS * 8)
    out = <uint64_t *><char *>result
    with nogil:
        for k in range(count):
            s = starts[first + k] - base
            e = (starts[first + k + 1] if first + k + 1 < nstarts else end) - base
            if e > s and data[e - 1] == 10:
                e -= 1
            _links_of_line(&data[0] + s if size else NULL, e - s, &t, out + _SLOTS * k)
    return result


# -- the id table ------------------------------------------------------------------------

cdef extern from *:
    """
    /* Ask for the cache line of a later lookup ahead of time (a hint: no effect where
       the compiler has no prefetch). */
    #if defined(__GNUC__) || defined(__clang__)
    #define bx_prefetch(p) __builtin_prefetch((p), 1)
    #else
    #define bx_prefetch(p) ((void)(p))
    #endif
    """
    void _prefetch "bx_prefetch" (const void *p) noexcept nogil


cdef struct _IdSlot:
    uint64_t key       # 0: empty (an id hash is never below 2)
    int64_t line


cdef enum:
    # A table this big or bigger is mapped on its own, asking for huge pages.
    _MAPPED_TABLE_BYTES = 2 << 20


cdef _IdSlot *_zeroed_slots(Py_ssize_t capacity) noexcept nogil:
    """Room for ``capacity`` empty slots, or NULL. Every id lands on a random slot, so a
    big table (32 MiB for a 1 GiB transcript) costs a TLB miss per probe in 4 KiB pages:
    it is mapped by itself and the kernel asked for huge pages (a hint: without them it
    is only as before). A fresh anonymous mapping is zero already, as calloc's is."""
    cdef size_t size = <size_t>capacity * sizeof(_IdSlot)
    cdef void *p
    if size < _MAPPED_TABLE_BYTES:
        return <_IdSlot *>calloc(capacity, sizeof(_IdSlot))
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if p == MAP_FAILED:
        return NULL
    madvise(p, size, MADV_HUGEPAGE)
    return <_IdSlot *>p


cdef void _free_slots(_IdSlot *slots, Py_ssize_t capacity) noexcept nogil:
    """Free what ``_zeroed_slots(capacity)`` gave (NULL: nothing)."""
    cdef size_t size = <size_t>capacity * sizeof(_IdSlot)
    if slots == NULL:
        return
    if size < _MAPPED_TABLE_BYTES:
        free(slots)
    else:
        munmap(slots, size)


cdef class IdTable:
    """Line of each entry id (by its hash): open addressing, kept beside a layout so an
    append resolves its parents without reading every earlier id again.

    ``IdTable(expected)`` makes room for ``expected`` ids at once, so filling it never
    grows it. A key and its line share a slot: a lookup costs one cache line."""

    cdef _IdSlot *slots
    cdef Py_ssize_t capacity   # a power of two, at least twice ``used``
    cdef Py_ssize_t used

    def __cinit__(self, Py_ssize_t expected=0):
        self.capacity = 0
        self.used = 0
        self.slots = NULL
        if expected < 0:
            raise ValueError(f"expected must be >= 0, got {expected}")
        self.reserve(expected)

    def __dealloc__(self):
        _free_slots(self.slots, self.capacity)

    cdef int reserve(self, Py_ssize_t more) except -1:
        """Grow (if need be) so ``more`` ids more keep the table at most half full."""
        cdef Py_ssize_t want = 1024
        if more > (<Py_ssize_t>1 << 40) - self.used:
            raise MemoryError()
        while want < 2 * (self.used + more):
            want *= 2
        if want > self.capacity:
            self._grow(want)
        return 0

    cdef int _grow(self, Py_ssize_t capacity) except -1:
        cdef _IdSlot *old = self.slots
        cdef _IdSlot *sl
        cdef Py_ssize_t old_capacity = self.capacity, k
        self.slots = _zeroed_slots(capacity)
        if self.slots == NULL:
            self.slots = old
            raise MemoryError()
        self.capacity = capacity
        # Invariant: the ids of old[0:k] are in the new slots, each once.
        for k in range(old_capacity):
            if old[k].key != 0:
                sl = self._probe(old[k].key)
                sl.key = old[k].key
                sl.line = old[k].line
        _free_slots(old, old_capacity)
        return 0

    cdef inline Py_ssize_t _home(self, uint64_t key) noexcept nogil:
        return <Py_ssize_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & (self.capacity - 1)

    cdef inline _IdSlot *_probe(self, uint64_t key) noexcept nogil:
        """The slot holding ``key``, or the empty slot it would go in (the table is never
        full, so there is one)."""
        cdef Py_ssize_t mask = self.capacity - 1, k = self._home(key)
        # Invariant: no slot from key's home to k holds it, and none is empty.
        while self.slots[k].key != 0 and self.slots[k].key != key:
            k = (k + 1) & mask
        return &self.slots[k]

    cdef inline int64_t get(self, uint64_t key) noexcept nogil:
        cdef _IdSlot *sl = self._probe(key)
        return sl.line if sl.key == key else -1

    def __len__(self):
        return self.used

    def lookup(self, uint64_t key) -> int:
        """The line of the entry whose id hashes to ``key``, or -1."""
        return self.get(key) if key >= 2 else -1

    def add_ids(self, const uint64_t[::1] ids, int64_t line0):
        """Record ids of lines ``line0...`` (as stored: 0 for a line without one, or a
        copy's); a key already present keeps its first line."""
        cdef Py_ssize_t k
        cdef _IdSlot *sl
        self.reserve(ids.shape[0])
        for k in range(ids.shape[0]):
            if ids[k] >= 2:
                sl = self._probe(ids[k])
                if sl.key == 0:
                    sl.key = ids[k]
                    sl.line = line0 + k
                    self.used += 1


# -- placing lines ------------------------------------------------------------------------

cdef enum:
    _AHEAD = 8   # lines ahead whose own id's slot is fetched while this one is placed


def hang_lines(const uint64_t[::1] links, IdTable table not None, int64_t line0,
               const int64_t[::1] up_before, int64_t last_kept):
    """Where lines ``line0...`` hang, their links given (4 per line, as :func:`line_links`
    returns them): ``(ids, up)`` as bytes (uint64, int64). ``table`` holds the ids of the
    lines before ``line0`` and takes the new ones; ``up_before`` is ``up`` of the
    ``len(up_before)`` lines just before ``line0`` (for the fan-out rule); ``last_kept`` the
    newest line before ``line0`` that is not a copy (-1: none)."""
    cdef Py_ssize_t count = links.shape[0] // _SLOTS, k, tail = up_before.shape[0]
    cdef int64_t i, a, d, prev = last_kept, target
    cdef uint64_t own, parent, logical, source
    cdef bytes ids_b, up_b
    cdef uint64_t *ids
    cdef int64_t *up
    cdef int64_t *seen
    cdef const int64_t *before = NULL
    cdef const uint64_t *lk = NULL
    cdef _IdSlot *mine
    cdef int64_t span = _FANOUT_SPAN
    if links.shape[0] != count * _SLOTS:
        raise ValueError("links hold 4 slots per line")
    if not 0 <= line0 <= _MAX_LINE - count or not -1 <= last_kept < line0:
        raise ValueError(f"lines {line0}.. (the last kept {last_kept}) are out of range")
    ids_b = PyBytes_FromStringAndSize(NULL, count * 8)
    up_b = PyBytes_FromStringAndSize(NULL, count * 8)
    ids = <uint64_t *><char *>ids_b
    up = <int64_t *><char *>up_b
    if count == 0:
        return ids_b, up_b
    lk = &links[0]
    if tail:
        before = &up_before[0]
    # Room for every new id now, so the loop below never grows the table: it runs
    # without the GIL and cannot fail.
    table.reserve(count)
    # seen[j] for line a + 1 + j during one fan-out search: 0 not visited, 1 descends
    # from a, 2 does not.
    seen = <int64_t *>malloc(span * sizeof(int64_t))
    if seen == NULL:
        raise MemoryError()
    try:
        with nogil:
            # Invariant: lines line0..i-1 are placed, their ids (not copies') are in the
            # table, and prev is the newest of them (or before them) that is not a copy.
            for k in range(count):
                if k + _AHEAD < count and lk[_SLOTS * (k + _AHEAD)] >= 2:
                    # The own id of a later line lands anywhere in the table: fetch its
                    # slot now. A parent is nearly always a recent line's id, cached.
                    _prefetch(&table.slots[table._home(lk[_SLOTS * (k + _AHEAD)])])
                i = line0 + k
                own = lk[_SLOTS * k + 0]
                parent = lk[_SLOTS * k + 1]
                logical = lk[_SLOTS * k + 2]
                source = lk[_SLOTS * k + 3]
                mine = NULL
                if own >= 2:
                    # One probe: the id's slot if an earlier line has it, else the empty
                    # slot it goes in (nothing is added before it is filled, below).
                    mine = table._probe(own)
                    if mine.key == own:
                        ids[k] = own
                        up[k] = _COPY  # a replayed copy: read once, as the first
                        continue
                ids[k] = own if own >= 2 else 0
                if parent == _NULL:
                    target = table.get(logical) if logical >= 2 else -1
                    up[k] = target if target >= 0 else prev
                elif parent >= 2:
                    target = table.get(parent)
                    up[k] = target if target >= 0 else prev
                    if target >= 0 and source == parent:
                        a = target
                        if i - a - 1 <= span:
                            d = _newest_below(a, i, line0, up, before, tail, seen)
                            if d >= 0:
                                up[k] = d
                else:
                    up[k] = prev
                if mine != NULL:
                    mine.key = own
                    mine.line = i
                    table.used += 1
                prev = i
    finally:
        free(seen)
    return ids_b, up_b


def hangs_as_chain(const int64_t[::1] up, int64_t line0) -> bool:
    """Whether each of lines ``line0...`` hangs on the line just before it (``up[k] ==
    line0 + k - 1``; the first line of a file on nothing, ``ROOT``): no copy, no fork, no
    line hung elsewhere. A tree that is such a chain keeps its places implicit (every
    line's ``pos``, ``tip`` and ``comp`` follow from the message and compaction lines)."""
    cdef Py_ssize_t count = up.shape[0], k = 0
    if not 0 <= line0 <= _MAX_LINE - count:
        raise ValueError(f"line {line0} is out of range")
    with nogil:
        while k < count and up[k] == line0 + k - 1:
            k += 1
    return k == count


cdef inline int64_t _up_of(int64_t j, int64_t line0, const int64_t *up_new,
                           const int64_t *up_before, Py_ssize_t tail) noexcept nogil:
    """``up`` of line j: a new line's, one of the ``tail`` before line0's, or ROOT (a line
    too old to matter: the search stops below its call anyway)."""
    if j >= line0:
        return up_new[j - line0]
    if j >= line0 - tail:
        return up_before[j - (line0 - tail)]
    return _ROOT


cdef int64_t _newest_below(int64_t a, int64_t i, int64_t line0, const int64_t *up_new,
                           const int64_t *up_before, Py_ssize_t tail, int64_t *seen) noexcept nogil:
    """The newest line in (a, i) that descends from line ``a``, or -1. Each line is
    visited once: a walk up from a candidate marks every line it passes with what it
    found."""
    cdef int64_t c, w, v, verdict, x
    for c in range(a + 1, i):
        seen[c - a - 1] = 0
    c = i - 1
    while c > a:
        # Walk up from c until a line already judged, a itself, or a line at or below a.
        w = c
        verdict = 2
        while True:
            if w == a:
                verdict = 1
                break
            if w < a:
                break
            if seen[w - a - 1] != 0:
                verdict = seen[w - a - 1]
                break
            v = _up_of(w, line0, up_new, up_before, tail)
            if v < 0 or v >= w:
                break  # a root, a copy, or (a lying array) a line not above this one
            w = v
        # Mark the walk with the verdict.
        x = c
        while x > a and seen[x - a - 1] == 0:
            seen[x - a - 1] = verdict
            v = _up_of(x, line0, up_new, up_before, tail)
            if v < 0 or v >= x:
                break
            x = v
        if verdict == 1:
            return c
        c -= 1
    return -1


cdef inline bint _in_sequence(uint8_t kind) noexcept nogil:
    return kind == KIND_MESSAGE or kind == KIND_CORRUPT


def place_lines(const int64_t[::1] up, const uint8_t[::1] kinds, int64_t line0,
                const int64_t[::1] ref_lines, const int64_t[::1] ref_pos,
                const int64_t[::1] ref_tip, const int64_t[::1] ref_comp):
    """``(pos, tip, comp)`` of lines ``line0...`` as int64 bytes, from their ``up`` and
    kinds (a message is a line of the message sequence: a message or a corrupt line);
    ``ref_*`` give those of the earlier lines they hang on (``ref_lines`` sorted)."""
    cdef Py_ssize_t count = up.shape[0], k, nref = ref_lines.shape[0], lo, hi, mid
    cdef int64_t u, p_pos, p_tip, p_comp, i
    cdef bytes pos_b = PyBytes_FromStringAndSize(NULL, count * 8)
    cdef bytes tip_b = PyBytes_FromStringAndSize(NULL, count * 8)
    cdef bytes comp_b = PyBytes_FromStringAndSize(NULL, count * 8)
    cdef int64_t *pos = <int64_t *><char *>pos_b
    cdef int64_t *tip = <int64_t *><char *>tip_b
    cdef int64_t *comp = <int64_t *><char *>comp_b
    if kinds.shape[0] != count:
        raise ValueError("one kind per line")
    if not 0 <= line0 <= _MAX_LINE - count:
        raise ValueError(f"line {line0} is out of range")
    if ref_pos.shape[0] != nref or ref_tip.shape[0] != nref or ref_comp.shape[0] != nref:
        raise ValueError("one value per referenced line")
    for k in range(count):
        i = line0 + k
        u = up[k]
        if u == _COPY:
            pos[k] = -1
            tip[k] = -1
            comp[k] = -1
            continue
        if u < 0:
            pos[k] = 0
            p_tip = -1
            p_comp = -1
        else:
            if u >= i:
                raise ValueError(f"line {i} hangs on line {u}, not an earlier one")
            if u >= line0:
                p_pos = pos[u - line0]
                p_tip = tip[u - line0]
                p_comp = comp[u - line0]
            else:
                lo, hi = 0, nref
                while lo < hi:
                    mid = (lo + hi) // 2
                    if ref_lines[mid] < u:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == nref or ref_lines[lo] != u:
                    raise ValueError(f"line {i} hangs on line {u}, whose place was not given")
                p_pos = ref_pos[lo]
                p_tip = ref_tip[lo]
                p_comp = ref_comp[lo]
            if p_pos < 0:
                raise ValueError(f"line {i} hangs on line {u}, a replayed copy")
            pos[k] = p_pos + 1 if p_tip == u else p_pos
        tip[k] = i if _in_sequence(kinds[k]) else p_tip
        comp[k] = i if kinds[k] == KIND_COMPACTION else p_comp
    return pos_b, tip_b, comp_b


def reads_as_list(const uint8_t[::1] kinds, const int64_t[::1] pos, const int64_t[::1] comp,
                  const int64_t[::1] up, int64_t line0, int64_t messages_before,
                  int64_t compaction_before) -> bool:
    """Whether lines ``line0...`` keep the tree a list: each message is the one after the
    previous message in the file (its position is its index in the file's message
    sequence) under the newest compaction before it, and each compaction comes after the
    messages before it in the file and follows the compaction before it in the file (the
    nearest compaction above the line it hangs on is that one: two compactions hung on
    one line are a fork, and the first is left off the second's branch).
    ``messages_before`` and ``compaction_before``: the messages before ``line0``, and the
    newest compaction line before it (-1: none); the lines before ``line0`` are taken to
    read as a list (the caller holds them to it)."""
    cdef Py_ssize_t count = kinds.shape[0], k
    cdef int64_t j = messages_before, last = compaction_before, u, above
    if pos.shape[0] != count or comp.shape[0] != count or up.shape[0] != count:
        raise ValueError("one position per line")
    if not 0 <= line0 <= _MAX_LINE - count:
        raise ValueError(f"line {line0} is out of range")
    for k in range(count):
        if _in_sequence(kinds[k]):
            if pos[k] != j or comp[k] != last:
                return False
            j += 1
        elif kinds[k] == KIND_COMPACTION:
            if pos[k] != j:
                return False
            # The nearest compaction above the line it hangs on: a new line's comp, or,
            # for an earlier line of a list, the newest compaction at or before it.
            u = up[k]
            if u >= line0 + k:
                return False
            if u >= line0:
                above = comp[u - line0]
            elif u >= 0:
                above = compaction_before if u >= compaction_before else -2
            else:
                above = -1
            if above != last:
                return False
            last = line0 + k
    return True


cdef struct _Keyed:
    uint64_t key       # the id's int64 bits with the sign bit flipped: sorts as unsigned
    int64_t line


cdef enum:
    _RADIX_BITS = 11
    _RADIX = 1 << _RADIX_BITS
    _PASSES = (64 + _RADIX_BITS - 1) // _RADIX_BITS
    # The passes from _TOP_PASS on sort by the key's top 31 bits; ids are hashes, so
    # those nearly always tell them apart, and the rest is a few runs of equal tops.
    _TOP_PASS = 3
    _TOP_SHIFT = _TOP_PASS * _RADIX_BITS
    # A run of equal tops this short is finished by insertion, a longer one by the
    # passes below _TOP_PASS.
    _SHORT_RUN = 64


cdef _Keyed *_radix_sort(_Keyed *a, _Keyed *b, Py_ssize_t n, Py_ssize_t *count, int first,
                         int last) noexcept nogil:
    """Sort ``a[0:n]`` (n >= 1) by the key's digits of passes ``first..last - 1`` (11 bits
    a pass, the least significant first), stably (equal digits keep their order), with
    ``b`` as room for n more and ``count`` for ``_PASSES * _RADIX`` counters: LSD radix.
    Returns whichever of ``a`` and ``b`` holds the sorted items. A pass whose digit is
    the same for every item is skipped."""
    cdef Py_ssize_t k, total, c
    cdef Py_ssize_t *cp
    cdef int p, shift
    cdef _Keyed *t
    memset(count, 0, (last - first) * _RADIX * sizeof(Py_ssize_t))
    # One read of the items counts the digits of every pass.
    for k in range(n):
        for p in range(first, last):
            count[(p - first) * _RADIX + ((a[k].key >> (p * _RADIX_BITS)) & (_RADIX - 1))] += 1
    for p in range(first, last):
        shift = p * _RADIX_BITS
        cp = count + (p - first) * _RADIX
        if cp[(a[0].key >> shift) & (_RADIX - 1)] == n:
            continue  # one digit for all: the order stands
        # cp[d] becomes where the first item with digit d goes.
        total = 0
        for k in range(_RADIX):
            c = cp[k]
            cp[k] = total
            total += c
        # Invariant: a[0:k] are in b at their places, in their order within a digit.
        for k in range(n):
            c = (a[k].key >> shift) & (_RADIX - 1)
            b[cp[c]] = a[k]
            cp[c] += 1
        t = a
        a = b
        b = t
    return a


cdef _Keyed *_sort_by_key(_Keyed *a, _Keyed *b, Py_ssize_t n, Py_ssize_t *count) noexcept nogil:
    """``a[0:n]`` (n >= 1) sorted by key, stably, with ``b`` as room for n more: returns
    whichever holds them. First by the top bits (three passes where all six would read
    and write every item twice as often), then each run of equal tops by the rest."""
    cdef _Keyed *done = _radix_sort(a, b, n, count, _TOP_PASS, _PASSES)
    cdef _Keyed *spare = b if done == a else a
    cdef _Keyed *run
    cdef _Keyed item
    cdef Py_ssize_t k = 0, e, x, y
    cdef uint64_t top
    # Invariant: done[0:k] is sorted by key, and every key after it is greater than
    # any in it (a run of equal tops is finished whole).
    while k < n:
        top = done[k].key >> _TOP_SHIFT
        e = k + 1
        while e < n and done[e].key >> _TOP_SHIFT == top:
            e += 1
        if e - k > _SHORT_RUN:
            run = _radix_sort(done + k, spare + k, e - k, count, 0, _TOP_PASS)
            if run != done + k:
                memcpy(done + k, run, (e - k) * sizeof(_Keyed))
        else:
            # Insertion: an item moves back past the greater keys only, so equal
            # keys keep their order.
            for x in range(k + 1, e):
                item = done[x]
                y = x
                while y > k and done[y - 1].key > item.key:
                    done[y] = done[y - 1]
                    y -= 1
                done[y] = item
        k = e
    return done


def id_index(const int64_t[::1] ids, const int64_t[::1] up, int64_t line0):
    """The index an append finds earlier ids by: ``(keys, lines)`` as int64 bytes, the ids
    of lines ``line0...`` (``ids``, ``up``: theirs) that have one and are not copies,
    sorted as int64 (equal ids, which only a lying array holds, in line order), and the
    line of each."""
    cdef Py_ssize_t n = ids.shape[0], k, got = 0
    cdef _Keyed *items
    cdef _Keyed *done
    cdef Py_ssize_t *count
    cdef bytes keys_b, lines_b
    cdef int64_t *keys
    cdef int64_t *lines
    cdef uint64_t sign = 1ULL << 63
    if up.shape[0] != n:
        raise ValueError("ids and up differ in length")
    if not 0 <= line0 <= _MAX_LINE - n:
        raise ValueError(f"line {line0} is out of range")
    items = <_Keyed *>malloc(2 * max(n, 1) * sizeof(_Keyed))
    count = <Py_ssize_t *>malloc(_PASSES * _RADIX * sizeof(Py_ssize_t))
    if items == NULL or count == NULL:
        free(items)
        free(count)
        raise MemoryError()
    try:
        with nogil:
            for k in range(n):
                if ids[k] != 0 and up[k] != _COPY:
                    items[got].key = (<uint64_t>ids[k]) ^ sign
                    items[got].line = line0 + k
                    got += 1
            done = _sort_by_key(items, items + max(n, 1), got, count) if got else items
        keys_b = PyBytes_FromStringAndSize(NULL, got * 8)
        lines_b = PyBytes_FromStringAndSize(NULL, got * 8)
        keys = <int64_t *><char *>keys_b
        lines = <int64_t *><char *>lines_b
        with nogil:
            for k in range(got):
                keys[k] = <int64_t>(done[k].key ^ sign)
                lines[k] = done[k].line
    finally:
        free(items)
        free(count)
    return keys_b, lines_b


def branch_lines(const int64_t[::1] tip, const int64_t[::1] up, int64_t lo, int64_t start,
                 Py_ssize_t limit):
    """Walk up from message line ``start``, given ``tip`` and ``up`` of lines ``lo...``:
    ``(lines, short)``, the message lines of its branch, newest first, at most ``limit``
    (int64 bytes), and whether the walk needs lines below ``lo`` to go on (read more of
    the arrays and walk again). A walk that reaches the root is not short."""
    cdef Py_ssize_t n = tip.shape[0], got = 0
    cdef int64_t m = start, u
    cdef bint short = False
    cdef bytes out_b
    cdef int64_t *out
    if up.shape[0] != n:
        raise ValueError("tip and up differ in length")
    if limit < 0:
        raise ValueError("limit must be >= 0")
    if not 0 <= lo <= _MAX_LINE - n:
        raise ValueError(f"line {lo} is out of range")
    out_b = PyBytes_FromStringAndSize(NULL, limit * 8)
    out = <int64_t *><char *>out_b
    # Invariant: out[0:got] are the branch's messages from start up, newest first, and m
    # is the next one up (-1: none).
    while got < limit and m >= 0:
        if m < lo or m - lo >= n:
            short = m < lo
            break
        out[got] = m
        got += 1
        u = up[m - lo]
        if u < 0 or u >= m:
            break  # the root (or, from a lying array, a line not above this one)
        if u < lo:
            short = True
            break
        m = tip[u - lo]
        if m > u:
            break  # a lying array: a message above a line is never below it
    return out_b[: got * 8], short
