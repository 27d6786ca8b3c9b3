# Declarations other native modules may cimport from boundctx._native.lineindex:
# the line kinds, the dialect table, and the block scanner filescan drives over a file.

from libc.stdint cimport int64_t, uint8_t

# Line kinds. The numbering is part of the layout sidecar format: never renumber.
cdef enum LineKind:
    KIND_MESSAGE = 1
    KIND_COMPACTION = 2
    KIND_OTHER = 3
    KIND_CORRUPT = 4
    KIND_BLANK = 5
    KIND_UNDECIDED = 6   # well-formed so far, but what decides lies past the classify window

# Where a qualified kind looks for its second value: the top-level member ``key``, or
# (inner_len > 0) the member ``inner`` of the object that member holds.
cdef struct QualifierPath:
    char key[64]
    int key_len
    char inner[64]
    int inner_len

cdef struct DialectEntry:
    char name[64]
    int name_len
    uint8_t kind
    int path                # index into Dialect.paths, or -1: every line of this type is `kind`
    int value_count         # a qualified entry is `kind` where the path holds one of these
    char values[4][64]
    int value_lens[4]

cdef struct Dialect:
    DialectEntry entries[32]
    int count
    QualifierPath paths[4]  # distinct, and no two begin with the same key
    int path_count

# Growable output of a scan: line start offsets and one kind per line.
cdef struct LineBuf:
    int64_t *starts
    uint8_t *kinds
    Py_ssize_t count
    Py_ssize_t cap

# Scanner state carried across blocks, so a line may straddle any number of reads.
cdef struct ScanState:
    int64_t line_start      # file offset of the line being assembled (in_line only)
    int in_line             # 1 while a line started in an earlier block has no "\n" yet
    unsigned char *pre      # the first `window` bytes of that line
    Py_ssize_t pre_len
    Py_ssize_t window
    int64_t line_len        # bytes of that line seen so far
    int last_sig            # last byte of it that is not JSON whitespace, or -1


cdef class DialectTable:
    cdef Dialect c_dialect  # what the classifier reads; filled once, by __init__


cdef uint8_t li_classify(const unsigned char *p, Py_ssize_t n, bint whole, int last_sig,
                         bint at_file_start, const Dialect *d) noexcept nogil

# The block scanner. A scanner is a ScanState and a LineBuf: _state_init makes one,
# _scan_block feeds it the blocks of a range in file order (from any thread, without
# the GIL; the result is the same wherever the blocks are cut), _result copies its lines
# out as a ScanResult under the GIL, and _release frees it.
cdef int _state_init(ScanState *st, LineBuf *out, Py_ssize_t window) noexcept nogil
cdef int _scan_block(ScanState *st, LineBuf *out, const unsigned char *buf, Py_ssize_t n,
                     int64_t off, const Dialect *d) noexcept nogil
cdef object _result(LineBuf *out, ScanState *st, int64_t scanned_end)
cdef void _release(ScanState *st, LineBuf *out) noexcept nogil
