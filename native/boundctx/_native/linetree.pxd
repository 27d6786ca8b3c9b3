# Declarations other native modules may cimport from boundctx._native.linetree: the
# table of link keys and the walk that reads one line's links, so filescan can read
# every line's links from the blocks it scans, in the same pass.

from libc.stdint cimport uint64_t

cdef enum:
    KEY_CAP = 48       # the longest key name a dialect may give
    MAX_KEYS = 16
    LINK_SLOTS = 4     # links per line: id, parent, logical parent, source
    # A line longer than this, its newline included, is not read for its links (all of
    # them absent): it hangs on the line before it (tree.LONGEST_LINKED_LINE).
    LONGEST_LINKED = 64 << 20

# The top-level keys whose values fill each slot, as _fill_keys copies them in.
cdef struct KeyTable:
    int count
    uint64_t lengths        # bit k set: some key is k bytes long (k <= KEY_CAP < 64)
    int slot[MAX_KEYS]
    Py_ssize_t length[MAX_KEYS]
    unsigned char name[MAX_KEYS][KEY_CAP]

# The four links of one line, p[0:n] without its newline; reads p[0:n] and never past
# it, on any bytes. Any thread, no GIL.
cdef void _links_of_line(const unsigned char *p, Py_ssize_t n, const KeyTable *t,
                         uint64_t *out) noexcept nogil

# Fill a table from a sequence of (name: bytes, slot: int); ValueError on a bad key.
cdef int _fill_keys(KeyTable *t, keys) except -1
