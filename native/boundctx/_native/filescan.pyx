"""Read a file's lines into the line index: ``scan_fd``, the threaded side of the scan.

A file is read with ``pread`` in blocks, a reader thread ahead of the scan, and a big
range is cut at line starts into parts scanned side by side. Every block goes through
``lineindex``'s block scanner (declared in ``lineindex.pxd``), which frames and
classifies; when asked, each line the block completes is then read for its links by
``linetree``'s walk (declared in ``linetree.pxd``), in place, or from a copy for a line
the blocks cut, so a file is read once for both. This is the only native module that
starts threads (CMake links it, alone, with the thread library).

Its twins are the reference ``scan_bytes`` over the same bytes (``tests/reference/
lineindex.py``) and ``line_links`` over them (``tests/reference/linetree.py``): property
tests assert that a scan of a file, in any blocks and parts, equals one scan of those
bytes, and its links theirs.
"""

import os

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno, EINTR, ENOMEM
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memchr, memcpy, memmove, strerror

from boundctx._native._build cimport BOUNDCTX_CHECKS
from boundctx._native._posix cimport (
    MADV_HUGEPAGE, madvise, posix_memalign, pread,
    pthread_cond_broadcast, pthread_cond_destroy, pthread_cond_init, pthread_cond_t,
    pthread_cond_wait, pthread_create, pthread_join, pthread_mutex_destroy,
    pthread_mutex_init, pthread_mutex_lock, pthread_mutex_t, pthread_mutex_unlock, pthread_t,
)
from boundctx._native.lineindex cimport (
    Dialect, DialectTable, LineBuf, ScanState, _release, _result, _scan_block, _state_init,
)
from boundctx._native.linetree cimport LINK_SLOTS, LONGEST_LINKED, KeyTable, _fill_keys, _links_of_line

from boundctx._native.lineindex import DEFAULT_CLASSIFY_WINDOW, ScanResult

cdef extern from *:
    """
    /* A part's progress, read by the thread that reports it while another writes it. */
    static inline long long bx_atomic_load(const long long *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline void bx_atomic_store(long long *p, long long v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    static inline int bx_atomic_load_int(const int *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline void bx_atomic_store_int(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    """
    long long _atomic_load "bx_atomic_load" (const long long *p) noexcept nogil
    void _atomic_store "bx_atomic_store" (long long *p, long long v) noexcept nogil
    int _atomic_load_int "bx_atomic_load_int" (const int *p) noexcept nogil
    void _atomic_store_int "bx_atomic_store_int" (int *p, int v) noexcept nogil

#: True when built with -DBOUNDCTX_CYTHON_CHECKS=ON (bounds and wraparound checks on).
BUILT_WITH_CHECKS = bool(BOUNDCTX_CHECKS)

DEFAULT_BLOCK_SIZE = 1 << 20  # 256 KiB-2 MiB measured best here (bench/RESULTS.md)

cdef enum:
    # A scan of a big range is cut into parts scanned side by side (scan_fd).
    _MAX_SCAN_THREADS = 4
    _MIN_PART_BYTES = 16 << 20   # a part smaller than this is not worth a thread
    MAX_CUT_SEARCH = 16 << 20    # how far past a cut point a line start is looked for
    HUGE_PAGE = 2 << 20          # x86-64's; elsewhere only an alignment

MAX_SCAN_THREADS = _MAX_SCAN_THREADS
MIN_PART_BYTES = _MIN_PART_BYTES


cdef int raise_errno(int err, str what=None) except -1:
    """Raise ``OSError(err, strerror(err))``, its message led by ``what`` when given.
    Always raises: -1 is the only return, and it means an exception is set."""
    message = strerror(err).decode("utf-8", "replace")
    raise OSError(err, message if what is None else f"{what}: {message}")


# -- reading ------------------------------------------------------------------------
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
    # Links (scan_fd's link_keys): LINK_SLOTS per line of `out`, kept in step with it.
    const KeyTable *keys    # NULL: links not asked for
    uint64_t *links
    Py_ssize_t links_cap    # lines `links` has room for
    long long link_limit    # a longer line (its newline included) has all-absent links
    unsigned char *carry    # the bytes so far of the line the blocks cut (no newline)
    Py_ssize_t carry_len
    Py_ssize_t carry_cap
    int carry_over          # 1: that line is longer than link_limit already; not kept


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


cdef int _carry(Part *pt, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """Append p[0:n] to the part's carried line; 0, or -1 when memory runs out. Callers
    keep the carry below ``link_limit``, so it never grows past that.

    ``p`` may lie in the carry itself (a block read there by ``_part_step_direct``):
    bytes already where they go are only counted, and a line begun inside such a block
    moves to the front (memmove: the two may overlap). The carry never grows then: its
    room was made before the read."""
    cdef Py_ssize_t cap
    cdef unsigned char *c
    if pt.carry != NULL and p == pt.carry + pt.carry_len:
        pt.carry_len += n
        return 0
    if pt.carry != NULL and <size_t>pt.carry <= <size_t>p < <size_t>(pt.carry + pt.carry_cap):
        memmove(pt.carry + pt.carry_len, p, n)
        pt.carry_len += n
        return 0
    if pt.carry_len + n > pt.carry_cap:
        cap = max(pt.carry_len + n, min(2 * pt.carry_cap, <Py_ssize_t>pt.link_limit), 65536)
        c = <unsigned char *>realloc(pt.carry, cap)
        if c == NULL:
            return -1
        pt.carry = c
        pt.carry_cap = cap
    memcpy(pt.carry + pt.carry_len, p, n)
    pt.carry_len += n
    return 0


cdef int _part_links(Part *pt, const unsigned char *buf, Py_ssize_t n, int64_t off,
                     Py_ssize_t first) noexcept nogil:
    """Read the links of the lines ``first...`` that the block ``buf[0:n]`` (at file
    offset ``off``) completed, just scanned into ``pt.out``, and carry the bytes of the
    line it leaves open. Returns 0, or -1 when memory runs out."""
    cdef Py_ssize_t count = pt.out.count, j, cap, seg, at
    cdef int64_t s, e
    cdef uint64_t *row
    cdef uint64_t *grown
    if pt.keys == NULL:
        return 0
    if count > pt.links_cap:
        cap = max(count, 2 * pt.links_cap, 4096)
        grown = <uint64_t *>realloc(pt.links, cap * LINK_SLOTS * sizeof(uint64_t))
        if grown == NULL:
            return -1
        pt.links = grown
        pt.links_cap = cap
    # Invariant: the links of lines 0..j-1 are in pt.links. A line ends where the next
    # begins: the next pushed line, the line left open (it starts in this block when
    # any line was pushed), or the block's end (which is then just past a newline).
    for j in range(first, count):
        row = pt.links + LINK_SLOTS * j
        s = pt.out.starts[j]
        if j + 1 < count:
            e = pt.out.starts[j + 1]
        elif pt.st.in_line:
            e = pt.st.line_start
        else:
            e = off + n
        if s >= off:
            # A whole line in the block: read in place (e - s > 0: it holds its newline).
            if e - s > pt.link_limit:
                row[0] = 0; row[1] = 0; row[2] = 0; row[3] = 0
            else:
                _links_of_line(buf + (s - off), <Py_ssize_t>(e - s - 1), pt.keys, row)
            continue
        # The carried line, ended by this block's first newline (j == first): its head
        # is in the carry (off - s bytes, unless it was over the limit), its tail here.
        if pt.carry_over or e - s > pt.link_limit:
            row[0] = 0; row[1] = 0; row[2] = 0; row[3] = 0
        else:
            if _carry(pt, buf, <Py_ssize_t>(e - off - 1)) < 0:
                return -1
            _links_of_line(pt.carry, pt.carry_len, pt.keys, row)
        pt.carry_len = 0
        pt.carry_over = 0
    if pt.st.in_line:
        # Keep the open line's bytes for when its newline comes, while it can still be
        # short enough: with its newline it is longer than the limit once the carry
        # reaches the limit, and is then only counted.
        at = 0
        if pt.st.line_start >= off:
            at = <Py_ssize_t>(pt.st.line_start - off)  # begun in this block
            pt.carry_len = 0
            pt.carry_over = 0
        seg = n - at
        if not pt.carry_over:
            if pt.carry_len + seg >= pt.link_limit:
                pt.carry_over = 1
                pt.carry_len = 0
            elif _carry(pt, buf + at, seg) < 0:
                return -1
    return 0


cdef int _part_open(Part *pt, int fd, long long start, long long end, Py_ssize_t window,
                    size_t block, const Dialect *d, bint direct, const KeyTable *keys,
                    long long link_limit) noexcept nogil:
    """Set up a part (``pt`` zeroed by the caller) and start its reads. Returns 0, or an
    errno (ENOMEM included); ``_part_close`` is safe after either.

    ``direct``: the scanning thread reads each block itself. With a part per core the
    cores are busy already, and a reader thread per part only adds a hand-off (two
    context switches) per block."""
    # The mutex and condition come first: _part_close destroys them whatever failed.
    pt.opened = 1
    pt.d = d
    pt.keys = keys
    pt.link_limit = link_limit
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
    cdef Py_ssize_t first
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
    first = pt.out.count
    rc = _scan_block(&pt.st, &pt.out, pf.buf[slot], got, pt.pos, pt.d)
    if rc == 0:
        rc = _part_links(pt, pf.buf[slot], got, pt.pos, first)
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


cdef unsigned char *_room_after_carry(Part *pt, size_t want) noexcept nogil:
    """Where the next block goes when it continues the carried line: right after the
    carry, so the line's bytes lie together without being copied there (a tool's
    output is megabytes of one line, and copying it block by block into the carry cost
    a tenth of a scan). NULL when the block goes to the read buffer as usual: links not
    asked for, no line carried, the carry at its limit, or no memory for the room (the
    usual path then still works, or reports the lack itself)."""
    cdef Py_ssize_t need, cap
    cdef unsigned char *c
    if pt.keys == NULL or not pt.st.in_line or pt.carry_over \
            or pt.carry_len + <long long>want >= pt.link_limit:
        return NULL
    need = pt.carry_len + <Py_ssize_t>want
    if need > pt.carry_cap:
        cap = max(need, min(2 * pt.carry_cap, <Py_ssize_t>pt.link_limit), 65536)
        c = <unsigned char *>realloc(pt.carry, cap)
        if c == NULL:
            return NULL
        pt.carry = c
        pt.carry_cap = cap
    return pt.carry + pt.carry_len


cdef int _part_step_direct(Part *pt) noexcept nogil:
    """``_part_step`` reading the block in this thread (same return values). One slot
    is enough: the read and the scan of a block never overlap here. A block that
    continues a carried line is read in after the carry (``_room_after_carry``)."""
    cdef Prefetch *pf = &pt.pf
    cdef ssize_t got
    cdef size_t want
    cdef Py_ssize_t first = pt.out.count
    cdef unsigned char *buf
    if pt.end != -1 and pt.pos >= pt.end:
        return 0
    want = pf.block if pt.end == -1 else <size_t>min(<long long>pf.block, pt.end - pt.pos)
    buf = _room_after_carry(pt, want)
    if buf == NULL:
        buf = pf.buf[0]
    got = _pread(pf.fd, buf, want, pt.pos)
    if got < 0:
        pt.err = errno
    if got <= 0:
        return 0
    if _scan_block(&pt.st, &pt.out, buf, got, pt.pos, pt.d) < 0 \
            or _part_links(pt, buf, got, pt.pos, first) < 0:
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
    free(pt.carry)
    pt.carry = NULL


cdef void _part_release(Part *pt) noexcept nogil:
    """Free a part's output (its lines, kinds and links), once the result holds copies."""
    _release(&pt.st, &pt.out)
    free(pt.links)
    pt.links = NULL


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
    cdef bytes starts, kinds, links = None
    cdef size_t row = LINK_SLOTS * sizeof(uint64_t)
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
        result = _result(&parts[0].out, &parts[0].st, parts[0].pos)  # no copy to join
        if parts[0].keys != NULL:
            result.links = PyBytes_FromStringAndSize(<char *>parts[0].links, parts[0].out.count * row)
        return result
    # Parts are contiguous and each ends at a line start, so their lines concatenate.
    for k in range(last + 1):
        total += parts[k].out.count
    starts = PyBytes_FromStringAndSize(NULL, total * sizeof(int64_t))
    kinds = PyBytes_FromStringAndSize(NULL, total)
    if parts[0].keys != NULL:
        links = PyBytes_FromStringAndSize(NULL, total * row)
    for k in range(last + 1):
        memcpy(<char *>starts + at * sizeof(int64_t), parts[k].out.starts,
               parts[k].out.count * sizeof(int64_t))
        memcpy(<char *>kinds + at, parts[k].out.kinds, parts[k].out.count)
        if links is not None and parts[k].out.count:
            memcpy(<char *>links + at * row, parts[k].links, parts[k].out.count * row)
        at += parts[k].out.count
    return ScanResult(starts, kinds,
                      parts[last].st.line_start if parts[last].st.in_line else parts[last].pos,
                      parts[last].pos, links)


def _default_threads():
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_SCAN_THREADS))


def scan_fd(int fd, DialectTable dialect not None, *, long long start=0, long long end=-1,
            Py_ssize_t classify_window=DEFAULT_CLASSIFY_WINDOW,
            Py_ssize_t block_size=DEFAULT_BLOCK_SIZE, int threads=0,
            long long min_part=MIN_PART_BYTES, progress=None, link_keys=None,
            long long link_limit=LONGEST_LINKED):
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
    link_keys : sequence of (bytes, int), optional
        Read every line's links too, in the same pass: the ``(name, slot)`` pairs of
        ``linetree.line_links`` (``tree.link_keys(dialect)``). An empty sequence walks
        no line: every link is absent.
    link_limit : int
        A line longer than this, its newline included, has all-absent links (it is not
        kept whole to be read); default ``linetree.LONGEST_LINKED_LINE``.

    Returns
    -------
    ScanResult
        ``scanned_end`` is where reading stopped: ``end``, or earlier if the file
        ended first. ``links``: with ``link_keys``, what ``line_links`` gives for the
        same lines of the same bytes; else None.

    Raises
    ------
    OSError
        When a read fails, or a thread cannot start.
    """
    cdef Part *parts = NULL
    cdef int n = 1, k, err = 0, more = 1
    cdef long long span, cut, prev, done, target
    cdef long long cuts[_MAX_SCAN_THREADS + 1]
    cdef KeyTable keys
    cdef const KeyTable *keys_p = NULL
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
    if link_limit < 1:
        raise ValueError(f"link_limit must be >= 1, got {link_limit}")
    if link_keys is not None:
        _fill_keys(&keys, link_keys)
        # No key to look for (a dialect whose entries name no parent): every link is
        # absent whatever a line holds, so no line is walked for them.
        if keys.count:
            keys_p = &keys
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
                                 <size_t>block_size, &dialect.c_dialect, n > 1, keys_p, link_limit)
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
        result = _joined_result(parts, n)
        if link_keys is not None and keys_p == NULL:
            result.links = bytes(len(result.kinds) * LINK_SLOTS * sizeof(uint64_t))
        return result
    finally:
        # Runs on every path, errors included: no thread outlives the call, and no
        # buffer either (the result holds copies).
        with nogil:
            # Invariant: parts[0:k] are closed and released.
            for k in range(n):
                _part_close(&parts[k])
                _part_release(&parts[k])
        free(parts)
