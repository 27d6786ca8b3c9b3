# The JSON lexing the byte walkers share: lineindex's classifier (which reads only as
# far as a line's kind), projection's display walk (which copies what it reads) and
# linetree's walk for a line's links (which skips strings unchecked).
#
# Every function reads p[0:n] and never past it: a line's bytes may be a prefix cut
# anywhere (the classify window, the display prefix), so "the bytes ended" is an answer
# of its own (RAN_OUT), apart from "this is not JSON" (MALFORMED). Indices are returned
# as Py_ssize_t >= 0; the two sentinels are negative, so one `r < 0` test catches both.
# None of these validates more than it must to find where a token ends.

from libc.string cimport memchr, memcpy

cdef extern from "boundctx/_native/linewalk_simd.h":
    # The first byte from i a string's byte loop stops at, 32 at a time with AVX2 where
    # the including module turned that on (see the header); else i.
    Py_ssize_t bx_plain_run(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil

# Status codes of the readers and skippers below (they return an index >= 0 otherwise).
cdef enum:
    RAN_OUT = -1      # the bytes ended inside the construct: more bytes could decide
    MALFORMED = -2    # not JSON, whatever follows


cdef inline bint is_ws(unsigned char c) noexcept nogil:
    # JSON whitespace less "\n": every caller works inside one framed line, where a
    # "\n" cannot occur, so leaving it out costs nothing and saves a compare.
    return c == 32 or c == 9 or c == 13


cdef inline int hexval(unsigned char c) noexcept nogil:
    """The value of one hex digit, or -1 when ``c`` is not one."""
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline Py_ssize_t skip_ws(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """The first index >= ``i`` that is not whitespace, or ``n``."""
    # Invariant: p[i0:i] (i0 the index on entry) is all whitespace.
    while i < n and is_ws(p[i]):
        i += 1
    return i


cdef inline Py_ssize_t read_string(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
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
    cdef Py_ssize_t j
    out_len[0] = 0
    # Invariant: p[i0:i] (i0 the index on entry) is whole characters and escapes of
    # one string, none of them its closing quote; out[0:*out_len] is their decoding,
    # unless *out_len == cap + 1 (overflowed, or not ASCII: nothing more is written).
    while i < n:
        # The bytes that stand for themselves, many at a time where the module turned
        # that on (a message is kilobytes of them), copied as the byte loop copies them.
        j = bx_plain_run(p, n, i)
        if j > i:
            if out != NULL and out_len[0] <= cap:
                if j - i <= cap - out_len[0]:
                    memcpy(out + out_len[0], p + i, j - i)
                    out_len[0] += j - i
                else:
                    memcpy(out + out_len[0], p + i, cap - out_len[0])
                    out_len[0] = cap + 1
            i = j
            if i >= n:
                break
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
                h0 = hexval(p[i + 2]); h1 = hexval(p[i + 3])
                h2 = hexval(p[i + 4]); h3 = hexval(p[i + 5])
                if h0 < 0 or h1 < 0 or h2 < 0 or h3 < 0:
                    return MALFORMED
                ch = (h0 << 12) | (h1 << 8) | (h2 << 4) | h3
                if ch >= 128:
                    ch = -1  # no one-byte form: mark the name unmatchable below
                i += 4
            else:
                return MALFORMED
            i += 2
        elif c < 32:
            return MALFORMED  # raw control characters are not allowed in JSON strings
        else:
            # Any other byte stands for itself. Multi-byte UTF-8 is copied byte by
            # byte: it never equals an ASCII name's bytes, so it needs no decoding.
            ch = c
            i += 1
        if out != NULL and out_len[0] <= cap:
            if ch < 0 or out_len[0] == cap:
                out_len[0] = cap + 1
            else:
                out[out_len[0]] = <unsigned char>ch
                out_len[0] += 1
    return RAN_OUT


cdef inline Py_ssize_t scan_scalar(const unsigned char *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """The end of the scalar (number, true, false, null) that begins at p[i]: the index
    of the first separator (``,`` ``}`` ``]``) or whitespace after it, or ``n`` when the
    bytes end first (the scalar may go on). MALFORMED when it is empty, or holds a byte
    that cannot be in any scalar and would start or end something else (``:`` ``"``
    ``{`` ``[``). The scalar's spelling is not checked: ``tru`` passes."""
    cdef Py_ssize_t j = i
    cdef unsigned char c
    # Invariant: p[i:j] holds no separator, whitespace or structural byte.
    while j < n:
        c = p[j]
        if c == 44 or c == 125 or c == 93 or is_ws(c):
            break
        if c == 58 or c == 34 or c == 123 or c == 91:
            return MALFORMED
        j += 1
    return j if j > i else MALFORMED


cdef inline Py_ssize_t skip_string_unchecked(const unsigned char *p, Py_ssize_t n,
                                              Py_ssize_t i) noexcept nogil:
    """The index after the closing quote of the string whose opening quote is at p[i-1],
    or RAN_OUT, found with memchr (a tool's output is megabytes of one string): a quote
    ends the string unless an odd run of backslashes comes before it. What is inside is
    not checked (no escape is decoded, no control character refused)."""
    cdef const unsigned char *q
    cdef Py_ssize_t j, k
    while i < n:
        q = <const unsigned char *>memchr(p + i, 34, n - i)
        if q == NULL:
            return RAN_OUT
        j = q - p
        k = j - 1
        # Invariant: p[k+1:j] are all backslashes.
        while k >= i and p[k] == 92:
            k -= 1
        if (j - 1 - k) % 2 == 0:
            return j + 1
        i = j + 1
    return RAN_OUT


cdef inline Py_ssize_t skip_container(const unsigned char *p, Py_ssize_t n, Py_ssize_t j, Py_ssize_t depth,
                                      bint checked=True) noexcept nogil:
    """The rest of a container from p[j], outside any string, with ``depth`` containers
    open before p[j]: the index after the one that closes them all, RAN_OUT or MALFORMED.
    :func:`skip_value`'s walk of a container (``j`` at its opening bracket, depth 0), and
    where a faster walk that stopped inside one hands over."""
    cdef Py_ssize_t dummy
    cdef unsigned char c
    # Invariant: depth counts the open containers before p[j], and p[j] is never inside
    # a string (strings are jumped over whole).
    while j < n:
        c = p[j]
        if c == 34:
            j = read_string(p, n, j + 1, NULL, 0, &dummy) if checked else skip_string_unchecked(p, n, j + 1)
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


cdef inline Py_ssize_t skip_value(const unsigned char *p, Py_ssize_t n, Py_ssize_t i,
                                  bint checked=True) noexcept nogil:
    """Skip the JSON value starting at p[i] (i < n); return the index after it, RAN_OUT
    or MALFORMED. Containers are skipped by depth counting, strings escape-aware; this
    is a skipper, not a validator (bracket kinds are not matched). ``checked`` false
    skips strings unchecked (:func:`skip_string_unchecked`), for a walk that only looks
    for keys and leaves judging the line to others."""
    cdef Py_ssize_t j, dummy
    cdef unsigned char c = p[i]
    if c == 34:
        return read_string(p, n, i + 1, NULL, 0, &dummy) if checked else skip_string_unchecked(p, n, i + 1)
    if c == 123 or c == 91:  # '{' '['
        return skip_container(p, n, i, 0, checked)
    j = scan_scalar(p, n, i)
    # A scalar that reaches the end of the bytes may go on past them: undecided.
    return RAN_OUT if j == n else j
