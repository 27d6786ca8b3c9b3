"""Transform one encoded JSON line without decoding it: the bounded display projection
of the read path, and the U+2028/U+2029 escape of the write path.

:func:`project_display` is what makes opening a window cheap: a line holding a 5 MB tool
output becomes its structure, its metadata and a bounded slice of its text, read from a
prefix of the line, so the rest of that output is never read or copied. The walk is
``_project``, a ``noexcept nogil`` function over a ``Projection`` state struct;
the Python function only validates, allocates and builds the result.

The slow, obviously-correct twin is ``project_display`` in ``tests/reference/lineindex.py``;
property tests assert the two agree on arbitrary bytes.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcpy

from boundctx._native.jsonlex cimport MALFORMED, RAN_OUT, hexval, is_ws, read_string, scan_scalar


cdef enum:
    MAX_DEPTH = 256      # deepest nesting the projection follows; deeper is refused
    SHORT_STRING = 128   # string values this short are metadata, kept whole for display


cdef enum PState:
    # What the walk expects next, outside strings. Containers are tracked on a stack,
    # so unlike the classifier's skipper this one matches bracket kinds.
    P_VALUE = 0            # a value must come next
    P_VALUE_OR_CLOSE = 1   # just after '[': a value or ']'
    P_KEY = 2              # just after ',' in an object: a key
    P_KEY_OR_CLOSE = 3     # just after '{': a key or '}'
    P_COLON = 4
    P_COMMA_OR_CLOSE = 5
    P_DONE = 6             # the root value is complete: only whitespace may follow


cdef enum Shown:
    # What _project found to show; project_display builds the bytes from it.
    SHOW_NOTHING = 0   # not JSON, or nothing complete yet: (None, kept, total_len)
    SHOW_WHOLE = 1     # the whole line: out[0:o], nothing cut
    SHOW_CUT = 2       # out[0:shown], the marker when in_text, then closers[0:nclose]


cdef enum TextEnd:
    # Where _copy_text stopped in a long string value.
    TEXT_CLOSED = 0       # at the string's closing quote
    TEXT_BUDGET = 1       # before a character the budget cannot hold
    TEXT_PREFIX_END = 2   # the prefix ends inside the string (or inside its last character)
    TEXT_MALFORMED = 3    # at a control character or a bad escape: not JSON


cdef struct Projection:
    # Set by the caller: the prefix, and what _project may spend.
    const unsigned char *p
    Py_ssize_t n
    long long total_len     # the whole line's length, >= n
    Py_ssize_t budget       # long-string bytes still to keep; content_limit on entry
    unsigned char *out      # n + 1 bytes: the walk never writes more than it reads
    # Set by _project.
    Py_ssize_t o            # bytes written to out
    Py_ssize_t kept         # long-string bytes copied (content_limit - budget)
    Py_ssize_t shown        # SHOW_CUT: bytes of out shown
    bint in_text            # SHOW_CUT: the cut is inside a long string, which the marker closes
    long long cut           # bytes of the line not represented
    Py_ssize_t nclose       # SHOW_CUT: closers of the containers left open
    unsigned char closers[MAX_DEPTH]
    unsigned char stack[MAX_DEPTH]   # the open containers' brackets, outermost first


#: The deepest nesting a display holds: the projection follows no deeper.
DISPLAY_DEPTH = MAX_DEPTH


# 1 for the ASCII bytes text content copies as they are: printable, but for '"' and '\\'.
cdef unsigned char _TEXT_ASCII[256]
for _c in range(256):
    _TEXT_ASCII[_c] = 1 if 32 <= _c < 128 and _c != 34 and _c != 92 else 0
del _c


cdef extern from *:
    """
    #define BX_LOW 0x0101010101010101ULL  /* 1 in every byte of a word */
    #define BX_HIGH 0x8080808080808080ULL /* the top bit of every byte */
    /* The word test finds the first byte as the lowest flag: little-endian words only;
       elsewhere every byte goes through the byte loop. */
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ \
        && (defined(__GNUC__) || defined(__clang__))
    #define BX_WORD_RUNS 1
    #define BX_CTZ64(x) __builtin_ctzll(x)
    #else
    #define BX_WORD_RUNS 0
    #define BX_CTZ64(x) 0
    #endif
    """
    const uint64_t BX_LOW
    const uint64_t BX_HIGH
    const bint BX_WORD_RUNS
    int BX_CTZ64(unsigned long long) noexcept nogil


cdef inline Py_ssize_t _plain_run(const unsigned char *p, Py_ssize_t u, Py_ssize_t limit) noexcept nogil:
    """The first index from ``u`` (below ``limit``) whose byte is not plain text ASCII
    (``_TEXT_ASCII``), or ``limit``: eight bytes a step while eight are left, then one.
    A word stops at its first byte that is 0x80 or above, below 0x20, '"' or '\\'. The
    tests below flag that byte exactly; a borrow can flag a byte after it, never one
    before, so the lowest flag (the first byte, little-endian) is the answer."""
    cdef uint64_t w, q, b, m
    while BX_WORD_RUNS and u + 8 <= limit:
        memcpy(&w, p + u, 8)
        q = w ^ (34 * BX_LOW)
        b = w ^ (92 * BX_LOW)
        m = (w | ((w - 32 * BX_LOW) & ~w) | ((q - BX_LOW) & ~q) | ((b - BX_LOW) & ~b)) & BX_HIGH
        if m:
            return u + (BX_CTZ64(m) >> 3)
        u += 8
    while u < limit and _TEXT_ASCII[p[u]]:
        u += 1
    return u


cdef inline bint _short_escape(unsigned char c) noexcept nogil:
    """Whether ``\\c`` is a whole two-byte JSON escape (not ``\\u``)."""
    return (c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110
            or c == 114 or c == 116)


cdef inline Py_ssize_t _utf8_len(unsigned char c) noexcept nogil:
    """Bytes of the UTF-8 sequence that lead byte ``c`` announces (1 for a stray
    continuation byte: copied alone; the decoder will flag it)."""
    if c < 0x80:
        return 1
    if c >= 0xF0:
        return 4
    if c >= 0xE0:
        return 3
    if c >= 0xC0:
        return 2
    return 1


cdef inline bint _valid_escape(const unsigned char *e) noexcept nogil:
    """Whether the escape at e[0] == '\\' is valid JSON (its bytes are all present)."""
    cdef unsigned char c = e[1]
    if c == 117:
        return (hexval(e[2]) >= 0 and hexval(e[3]) >= 0 and hexval(e[4]) >= 0
                and hexval(e[5]) >= 0)
    return _short_escape(c)


cdef inline int _surrogate(const unsigned char *e) noexcept nogil:
    """For a \\uXXXX escape at e (six bytes present): 1 for a high surrogate
    (D800-DBFF), 2 for a low one (DC00-DFFF), 0 otherwise."""
    cdef int h0 = hexval(e[2]), h1 = hexval(e[3]), h2 = hexval(e[4]), h3 = hexval(e[5])
    if h0 != 13 or h1 < 8 or h2 < 0 or h3 < 0:
        return 0
    return 1 if h1 < 12 else 2


cdef inline bint _valid_continuation(const unsigned char *p, Py_ssize_t u) noexcept nogil:
    """Whether p[1:u] are all UTF-8 continuation bytes."""
    cdef Py_ssize_t k
    # Invariant: p[1:k] are continuation bytes (10xxxxxx).
    for k in range(1, u):
        if p[k] < 0x80 or p[k] > 0xBF:
            return False
    return True


cdef TextEnd _copy_text(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at,
                        unsigned char *out, Py_ssize_t *o_at, Py_ssize_t *budget_at) noexcept nogil:
    """Copy the content of a long string value from p[*at] to out[*o_at] while the
    budget lasts, one whole character or escape at a time, so a cut never splits either
    (a surrogate pair counts as one). ``*at``, ``*o_at`` and ``*budget_at`` advance past
    what was copied; the return value says why the copy stopped. Never reads p[n]."""
    cdef Py_ssize_t j = at[0], o = o_at[0], budget = budget_at[0], u, k, limit
    cdef unsigned char c
    cdef TextEnd end
    # Invariant: out[o0:o] == p[j0:j] (the values on entry), whole characters and
    # escapes of the string, none of them its closing quote; the budget has been
    # charged one byte for each byte copied, so it never goes below 0.
    while True:
        # Fast path: a run of plain characters is copied with one memcpy, as far as the
        # budget reaches: printable ASCII other than '"' and '\\', and UTF-8 sequences
        # whose bytes are all in the prefix, each taken whole as the slow path below
        # takes it (a lead byte whose continuation is invalid, or a stray continuation
        # byte, alone). Text in other scripts is then not copied a character at a time.
        # Invariant: p[j:u] is whole characters the slow path would copy one by one,
        # and u - j never exceeds the budget.
        # ASCII is passed over eight bytes a step (_plain_run), as far as the budget
        # and the prefix reach (limit); a two-byte escape (a log's "\\n") is taken
        # whole, as the slow path would, so it does not end the run.
        u = j
        limit = j + budget if budget < n - j else n
        while True:
            u = _plain_run(p, u, limit)
            if u >= limit:
                break
            c = p[u]
            if c == 92 and u + 2 <= limit and _short_escape(p[u + 1]):
                u += 2
                continue
            if c < 128:
                break
            k = _utf8_len(c)
            if k > 1:
                if u + k > n:
                    break  # the prefix cuts it: the slow path says so
                if not _valid_continuation(p + u, k):
                    k = 1
            if u + k - j > budget:
                break
            u += k
        if u > j:
            memcpy(out + o, p + j, u - j)
            o += u - j
            budget -= u - j
            j = u
        if j >= n:
            end = TEXT_PREFIX_END
            break
        c = p[j]
        if c == 34:
            end = TEXT_CLOSED
            break
        # u: the length of the character or escape at p[j].
        if c == 92:
            u = 6 if (j + 1 < n and p[j + 1] == 117) else 2
        elif c < 32:
            end = TEXT_MALFORMED
            break
        else:
            u = _utf8_len(c)
        if j + u > n:
            # The prefix cuts it; whether it is valid is for a longer prefix to say.
            end = TEXT_PREFIX_END
            break
        if c == 92:
            if not _valid_escape(p + j):
                end = TEXT_MALFORMED
                break
            if u == 6 and _surrogate(p + j) == 1:
                # A high surrogate and its low half are one character: never cut
                # between them (the half alone is not JSON any decoder accepts).
                if j + 12 > n:
                    end = TEXT_PREFIX_END
                    break
                if p[j + 6] == 92 and p[j + 7] == 117 and _surrogate(p + j + 6) == 2:
                    u = 12
        elif u > 1 and not _valid_continuation(p + j, u):
            u = 1  # invalid UTF-8: one byte alone, never the quote after it
        if u > budget:
            end = TEXT_BUDGET
            break
        memcpy(out + o, p + j, u)
        o += u
        j += u
        budget -= u
    at[0] = j
    o_at[0] = o
    budget_at[0] = budget
    return end


cdef Shown _project(Projection *pr) noexcept nogil:
    """Walk pr.p[0:pr.n] and fill pr's outputs; the return value says what to show.

    One pass, no allocation, no lookahead past the prefix. Structure, keys, scalars and
    short strings are copied whole or not at all; long strings are copied under the
    budget by _copy_text. Where the walk cannot go on (the prefix ends, the budget runs
    out) it falls back to the last *safe point*: a prefix of the output that, with the
    open containers closed, is valid JSON.
    """
    # Locals, written back at the end: pr's fields could alias pr.out, so keeping
    # them in the struct during the walk would make the compiler reload them after
    # every byte written.
    cdef const unsigned char *p = pr.p
    cdef unsigned char *out = pr.out
    cdef unsigned char *stack = pr.stack
    cdef Py_ssize_t n = pr.n, budget = pr.budget
    cdef Py_ssize_t depth = 0, i = 0, o = 0, j, u, k
    cdef Py_ssize_t safe_o = 0, safe_depth = 0, safe_src = 0
    cdef PState state = P_VALUE
    cdef TextEnd text_end
    cdef bint malformed = False, cut = False, in_text = False, cut_by_end = False
    cdef unsigned char c
    # Invariant: out[0:o] is the projection of p[0:i] (so o <= i <= n); stack[0:depth]
    # holds the containers open at p[i]; out[0:safe_o] followed by closers for
    # stack[0:safe_depth] is valid JSON representing p[0:safe_src].
    while i < n and not malformed and not cut:
        c = p[i]
        if is_ws(c):
            i += 1  # whitespace between tokens is dropped: the display is compact
            continue
        if state == P_DONE:
            malformed = True  # bytes after the root value
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
            # A key is copied whole and is not text content; a key the prefix cuts
            # short is dropped by rolling back to the last safe point.
            if c != 34:
                malformed = True
            else:
                j = read_string(p, n, i + 1, NULL, 0, &u)
                if j == MALFORMED:
                    malformed = True
                elif j == RAN_OUT:
                    cut = True
                else:
                    memcpy(out + o, p + i, j - i); o += j - i; i = j
                    state = P_COLON
        elif c == 123 or c == 91:
            if depth == MAX_DEPTH:
                malformed = True  # refused rather than followed: the stack is fixed
            else:
                stack[depth] = c
                depth += 1
                out[o] = c; o += 1; i += 1
                state = P_KEY_OR_CLOSE if c == 123 else P_VALUE_OR_CLOSE
                safe_o = o; safe_depth = depth; safe_src = i
        elif c == 34:
            # A short string value (ids, roles, timestamps, type names) is metadata:
            # copied whole, outside the budget. Looking ahead only SHORT_STRING bytes
            # keeps this O(1) on a multi-megabyte string.
            j = read_string(p, min(n, i + 2 + SHORT_STRING), i + 1, NULL, 0, &u)
            if j == MALFORMED:
                malformed = True
            elif j > 0:
                memcpy(out + o, p + i, j - i); o += j - i; i = j
                state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                safe_o = o; safe_depth = depth; safe_src = i
            else:
                # Text content: the opening quote, then what the budget holds.
                out[o] = 34; o += 1
                j = i + 1
                text_end = _copy_text(p, n, &j, out, &o, &budget)
                if text_end == TEXT_MALFORMED:
                    malformed = True
                elif text_end == TEXT_CLOSED:
                    i = j + 1
                    out[o] = 34; o += 1
                    state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                    safe_o = o; safe_depth = depth; safe_src = i
                else:
                    # Cut inside the text: the marker will close this string.
                    i = j
                    cut = True
                    in_text = True
                    cut_by_end = text_end == TEXT_PREFIX_END
        else:
            # A scalar (number, true, false, null): copied whole or not at all.
            j = scan_scalar(p, n, i)
            if j == MALFORMED:
                malformed = True  # also ',' or '}' where a value belongs
            elif j == n and pr.total_len > n:
                cut = True  # the scalar may go on past the prefix
            else:
                memcpy(out + o, p + i, j - i); o += j - i; i = j
                state = P_DONE if depth == 0 else P_COMMA_OR_CLOSE
                safe_o = o; safe_depth = depth; safe_src = i
    pr.o = o
    pr.kept = pr.budget - budget  # every byte copied under the budget was charged to it
    if malformed:
        return SHOW_NOTHING
    if not cut and state != P_DONE:
        if pr.total_len > n:
            cut = True  # the prefix ended between tokens
        else:
            return SHOW_NOTHING  # the whole line ends early: not JSON
    if not cut:
        return SHOW_WHOLE
    if pr.total_len == n and (cut_by_end or not in_text):
        return SHOW_NOTHING  # the whole line ends inside a key or string
    if not in_text and safe_o == 0:
        return SHOW_NOTHING  # nothing complete to show yet
    if in_text:
        # The marker closes the cut string, which makes it a complete value: what
        # is shown is everything written, and every container still open is closed.
        safe_o = o
        safe_depth = depth
        safe_src = i
    pr.shown = safe_o
    pr.in_text = in_text
    pr.cut = pr.total_len - safe_src
    pr.nclose = safe_depth
    # Invariant: closers[0:k] close stack[safe_depth-k:safe_depth], innermost first.
    for k in range(safe_depth):
        pr.closers[k] = 125 if stack[safe_depth - 1 - k] == 123 else 93
    return SHOW_CUT


def project_display(const unsigned char[::1] prefix not None, long long total_len,
                    Py_ssize_t content_limit):
    """Build the display form of one JSON line from a prefix of it.

    Copies the line's structure, keys, scalars and short string values (at most
    128 bytes as written: ids, roles, timestamps), and at most ``content_limit`` bytes
    (as written, escapes included) of its longer string values: the text. Where text is
    cut, the cut string ends with a marker ``" [... N more bytes not shown]"`` and every
    open container is closed, so the result is valid JSON. Bytes past ``prefix`` are
    never needed.

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
    cdef Projection pr
    cdef Shown shown
    cdef bytes display, marker
    cdef char *w
    if content_limit < 0:
        raise ValueError(f"content_limit must be >= 0, got {content_limit}")
    if total_len < prefix.shape[0]:
        raise ValueError(f"total_len ({total_len}) is shorter than the prefix ({prefix.shape[0]})")
    pr.n = prefix.shape[0]
    pr.p = &prefix[0] if pr.n else NULL
    pr.total_len = total_len
    pr.budget = content_limit
    pr.out = <unsigned char *>malloc(pr.n + 1)  # + 1: never malloc(0), which may be NULL
    if pr.out == NULL:
        raise MemoryError()
    try:
        with nogil:
            shown = _project(&pr)
        if shown == SHOW_NOTHING:
            return (None, pr.kept, total_len)
        if shown == SHOW_WHOLE:
            return (PyBytes_FromStringAndSize(<char *>pr.out, pr.o), pr.kept, 0)
        # One copy into the result: what is shown, the marker, the closers.
        marker = f" [... {pr.cut} more bytes not shown]\"".encode("ascii") if pr.in_text else b""
        display = PyBytes_FromStringAndSize(NULL, pr.shown + len(marker) + pr.nclose)
        w = <char *>display
        memcpy(w, pr.out, pr.shown)
        memcpy(w + pr.shown, <char *>marker, len(marker))
        memcpy(w + pr.shown + len(marker), pr.closers, pr.nclose)
        return (display, pr.kept, pr.cut)
    finally:
        free(pr.out)


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
        return data  # the common case: no copy at all
    out = bytearray(n + 3 * hits)  # 3 bytes become 6
    w = out
    i = 0
    with nogil:
        # Invariant: w[0:o] is p[0:i] with every separator in it escaped, and i never
        # stops inside one (a separator is consumed whole), so o == i + 3 * (hits so far).
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


def count_openers(data not None, Py_ssize_t start, Py_ssize_t end):
    """How many ``[`` and ``{`` bytes ``data[start:end]`` holds, in one pass.

    What :mod:`boundctx.transcript.lineformat` asks before it walks a decoded record for
    its depth: a record cannot nest deeper than the openers its bytes hold. One branch-free
    loop the compiler vectorises, instead of two ``bytes.count`` passes.
    """
    cdef const unsigned char[::1] v = data
    cdef Py_ssize_t n = v.shape[0], i, k, block
    cdef Py_ssize_t count = 0
    cdef unsigned char in_block
    cdef const unsigned char *p
    if not 0 <= start <= end <= n:
        raise ValueError(f"{start}..{end} is not a range of the {n} bytes given")
    if start == end:
        return 0
    p = &v[0]
    with nogil:
        # Counted a block of at most 255 bytes at a time in one byte, which the compiler
        # keeps in byte lanes of a vector register (a wider count would make it widen
        # every byte first); no block can hold more than 255 openers.
        # Invariant: count is the openers in p[start:i].
        i = start
        while i < end:
            block = min(end - i, 255)
            in_block = 0
            for k in range(block):
                in_block += (p[i + k] == 91) | (p[i + k] == 123)
            count += in_block
            i += block
    return count
