"""Map token boundaries, given as UTF-8 byte lengths per token, to code-point offsets.

Section planning cuts a Python ``str`` by token boundaries. Tokenizers speak UTF-8 bytes
(byte-level BPE may even split one character over two tokens); Python slices by code
point. Decoding tokens back to text to find offsets is slow and lossy (a half character
decodes to U+FFFD), so boundaries are mapped here, in one pass over the text, with
offsets by construction.

Conventions: a code point's UTF-8 width is 1-4 bytes; a lone surrogate (which ``str``
can hold) counts 3 bytes, as ``"surrogatepass"`` encodes it. A token boundary inside a
multi-byte character snaps *down* (to the character's start) for a token's start and
*up* (past the character) for its end, so every token's span covers all of its bytes.

Outputs are written into int64 buffers the caller allocates (the shell uses numpy).
Every walk runs with the GIL released, over a ``strview.Text`` of the str.
The slow twin is ``tests/reference/tokenmap.py``.
"""

from libc.stdint cimport int64_t

from boundctx._native.strview cimport Text, text_at, text_view


cdef inline int _width(Py_UCS4 c) noexcept nogil:
    # Invariant: sum of _width over a str == len(s.encode("utf-8", "surrogatepass")).
    if c < 0x80:
        return 1
    if c < 0x800:
        return 2
    if c < 0x10000:
        return 3
    return 4


cdef int64_t _utf8_length(const Text *t) noexcept nogil:
    """Bytes of the text in UTF-8 (lone surrogates count 3). Cannot fail."""
    cdef int64_t n = 0
    cdef Py_ssize_t i
    # Invariant: n == UTF-8 bytes of text[0:i].
    for i in range(t.n):
        n += _width(text_at(t, i))
    return n


def utf8_length(str text not None):
    """Bytes of ``text`` in UTF-8 (lone surrogates count 3), without encoding it."""
    cdef Text t = text_view(text)
    cdef int64_t n
    with nogil:
        n = _utf8_length(&t)
    return n


def code_point_byte_offsets(str text not None, int64_t[::1] out not None):
    """Fill ``out[i]`` with the UTF-8 byte offset of code point ``i``, for
    ``i in range(len(text) + 1)`` (the last entry is the total length).

    Raises
    ------
    ValueError
        When ``out`` does not hold exactly ``len(text) + 1`` entries.
    """
    cdef Text t = text_view(text)
    cdef Py_ssize_t i, n = t.n
    cdef int64_t b = 0
    if out.shape[0] != n + 1:
        raise ValueError(f"out must hold len(text) + 1 = {n + 1} entries, got {out.shape[0]}")
    with nogil:
        # Invariant: out[0:i] are filled and b is the byte offset of code point i.
        for i in range(n):
            out[i] = b
            b += _width(text_at(&t, i))
        out[n] = b


cdef Py_ssize_t _first_negative(const int64_t[::1] lengths) noexcept nogil:
    """The first index whose length is negative, or -1."""
    cdef Py_ssize_t k
    # Invariant: lengths[0:k] are all >= 0.
    for k in range(lengths.shape[0]):
        if lengths[k] < 0:
            return k
    return -1


cdef Py_ssize_t _first_overrun(const int64_t[::1] lengths, int64_t size,
                               int64_t *left) noexcept nogil:
    """The first index whose length runs past the ``size`` bytes still left after the
    ones before it, or -1; ``*left`` is then what is left (at that index, or after all
    of them). The lengths are all >= 0 (``_first_negative`` said so)."""
    cdef Py_ssize_t k
    # Invariant: left[0] == size - (sum of lengths[0:k]) and 0 <= left[0] <= size: the
    # sum is never formed, so hostile lengths cannot wrap it.
    left[0] = size
    for k in range(lengths.shape[0]):
        if lengths[k] > left[0]:
            return k
        left[0] -= lengths[k]
    return -1


def token_spans(str text not None, const int64_t[::1] piece_bytes not None,
                int64_t[::1] cp_start not None, int64_t[::1] cp_end not None):
    """Code-point span of each token of ``text``, from its tokens' UTF-8 byte lengths.

    Parameters
    ----------
    text : str
        The text that was tokenized.
    piece_bytes : int64 buffer
        Byte length of each token, in order; they must add up to the text's UTF-8
        length (``utf8_length``). Zero-length tokens (special or empty pieces) are
        allowed and get an empty span.
    cp_start, cp_end : int64 buffers
        Filled with each token's code-point start (snapped down) and end (snapped up);
        same length as ``piece_bytes``.

    Raises
    ------
    ValueError
        When a length is negative, the lengths run past or fall short of the text's
        UTF-8 length (checked one by one, so no sum can wrap), or the output buffers
        are the wrong size.
    """
    cdef Text t = text_view(text)
    cdef Py_ssize_t k, bad, ntok = piece_bytes.shape[0], n = t.n
    cdef Py_ssize_t c = 0          # code point index
    cdef int64_t cb = 0            # byte offset of code point c
    cdef int64_t s = 0, e, left, jb, size
    cdef Py_ssize_t j
    if cp_start.shape[0] != ntok or cp_end.shape[0] != ntok:
        raise ValueError(f"cp_start and cp_end must hold {ntok} entries (one per token)")
    # Every length is checked against the bytes still left, never summed first: a sum
    # of hostile lengths can wrap int64 to the right total, and the walk below reads
    # the text without bounds checks, so it may only run on lengths that stay inside.
    # The checks scan without the GIL and raise after it is back.
    with nogil:
        size = _utf8_length(&t)
        bad = _first_negative(piece_bytes)
    if bad >= 0:
        raise ValueError(f"token {bad} has a negative byte length ({piece_bytes[bad]})")
    with nogil:
        bad = _first_overrun(piece_bytes, size, &left)
    if bad >= 0:
        raise ValueError(
            f"token byte lengths add up to more than the text's {size} bytes of UTF-8 "
            f"(token {bad} has {piece_bytes[bad]} bytes, {left} are left): the pieces do not "
            "come from this text")
    if left:
        raise ValueError(
            f"token byte lengths add up to {size - left}, but the text is {size} "
            "bytes of UTF-8: the pieces do not come from this text")
    with nogil:
        # Invariant: cb is the byte offset of code point c, and cb <= s (token k's
        # start): c is the last code point starting at or before s. s and e stay in
        # [0, size], so c and j stay in [0, n]; the c < n and j < n guards keep the
        # walk inside the text on any lengths.
        for k in range(ntok):
            e = s + piece_bytes[k]
            while c < n and cb + _width(text_at(&t, c)) <= s:
                cb += _width(text_at(&t, c))
                c += 1
            cp_start[k] = c  # snapped down: the character holding byte s starts at cb <= s
            # The end: the first code point boundary at or after e. Walk a local cursor
            # so the next token can start inside this token's last character.
            j = c
            jb = cb
            # Invariant: jb is the byte offset of code point j, and code points c..j-1
            # all start before e.
            while jb < e and j < n:
                jb += _width(text_at(&t, j))
                j += 1
            cp_end[k] = j
            s = e
    return ntok
