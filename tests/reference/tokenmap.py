"""Slow, obviously-correct twin of ``boundctx._native.tokenmap``.

Works on the encoded bytes: a table says which code point each byte belongs to, and a
token's span is read off that table.
"""

from __future__ import annotations


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def utf8_length(text: str) -> int:
    return len(encode(text))


def code_point_byte_offsets(text: str) -> list[int]:
    """Byte offset of each code point, plus the total length."""
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + len(encode(ch)))
    return offsets


def token_spans(text: str, piece_bytes: list[int]) -> tuple[list[int], list[int]]:
    """(starts, ends) in code points; starts snap down, ends snap up."""
    if any(n < 0 for n in piece_bytes):
        raise ValueError("negative byte length")
    if sum(piece_bytes) != utf8_length(text):
        raise ValueError("the pieces do not come from this text")
    owner = []  # owner[b] = index of the code point byte b belongs to
    for i, ch in enumerate(text):
        owner.extend([i] * len(encode(ch)))
    starts, ends = [], []
    pos = 0
    for n in piece_bytes:
        start_byte, end_byte = pos, pos + n
        starts.append(owner[start_byte] if start_byte < len(owner) else len(text))
        if n == 0:
            # An empty token: its end snaps up from where it stands, like its start
            # snaps down; inside a character that is the character's end.
            at = start_byte
            ends.append(len(text) if at >= len(owner) else
                        (owner[at] if at == 0 or owner[at - 1] != owner[at] else owner[at] + 1))
        else:
            ends.append(owner[end_byte - 1] + 1)
        pos = end_byte
    return starts, ends
