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
The slow twin is ``tests/reference/tokenmap.py``.
"""

from libc.stdint cimport int64_t


cdef inline int _width(Py_UCS4 c) noexcept nogil:
    # Invariant: sum of _width over a str == len(s.encode("utf-8", "surrogatepass")).
    if c < 0x80:
        return 1
    if c < 0x800:
        return 2
    if c < 0x10000:
        return 3
    return 4


def utf8_length(str text not None):
    """Bytes of ``text`` in UTF-8 (lone surrogates count 3), without encoding it."""
    cdef Py_ssize_t n = 0
    cdef Py_UCS4 c
    for c in text:
        n += _width(c)
    return n


def code_point_byte_offsets(str text not None, int64_t[::1] out not None):
    """Fill ``out[i]`` with the UTF-8 byte offset of code point ``i``, for
    ``i in range(len(text) + 1)`` (the last entry is the total length).

    Raises
    ------
    ValueError
        When ``out`` does not hold exactly ``len(text) + 1`` entries.
    """
    cdef Py_ssize_t i = 0, n = len(text)
    cdef int64_t b = 0
    cdef Py_UCS4 c
    if out.shape[0] != n + 1:
        raise ValueError(f"out must hold len(text) + 1 = {n + 1} entries, got {out.shape[0]}")
    # Invariant: out[0:i] are filled and b is the byte offset of code point i.
    for c in text:
        out[i] = b
        b += _width(c)
        i += 1
    out[n] = b


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
    cdef Py_ssize_t k, ntok = piece_bytes.shape[0], n = len(text)
    cdef Py_ssize_t c = 0          # code point index
    cdef int64_t cb = 0            # byte offset of code point c
    cdef int64_t s = 0, e, left, L, jb, size
    cdef Py_ssize_t j
    if cp_start.shape[0] != ntok or cp_end.shape[0] != ntok:
        raise ValueError(f"cp_start and cp_end must hold {ntok} entries (one per token)")
    size = utf8_length(text)
    # Every length is checked against the bytes still left, never summed first: a sum
    # of hostile lengths can wrap int64 to the right total, and the walk below reads
    # text[j] without bounds checks, so it may only run on lengths that stay inside.
    for k in range(ntok):
        L = piece_bytes[k]
        if L < 0:
            raise ValueError(f"token {k} has a negative byte length ({L})")
    # Invariant: left == size - (sum of piece_bytes[0:k]) and 0 <= left <= size.
    left = size
    for k in range(ntok):
        L = piece_bytes[k]
        if L > left:
            raise ValueError(
                f"token byte lengths add up to more than the text's {size} bytes of UTF-8 "
                f"(token {k} has {L} bytes, {left} are left): the pieces do not come from this text")
        left -= L
    if left:
        raise ValueError(
            f"token byte lengths add up to {size - left}, but the text is {size} "
            "bytes of UTF-8: the pieces do not come from this text")
    # Invariant: cb is the byte offset of code point c, and cb <= s (token k's start):
    # c is the last code point starting at or before s. s and e stay in [0, size], so
    # c and j stay in [0, n]; the c < n and j < n guards keep the walk inside the text
    # even if the buffer changed under us.
    for k in range(ntok):
        e = s + piece_bytes[k]
        while c < n and cb + _width(text[c]) <= s:
            cb += _width(text[c])
            c += 1
        cp_start[k] = c  # snapped down: the character holding byte s starts at cb <= s
        # The end: the first code point boundary at or after e. Walk a local cursor so
        # the next token can start inside this token's last character.
        j = c
        jb = cb
        while jb < e and j < n:
            jb += _width(text[j])
            j += 1
        cp_end[k] = j
        s = e
    return ntok
