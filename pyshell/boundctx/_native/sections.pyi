from typing import Any, Final

import numpy as np
from typing_extensions import Buffer

# int64 arrays: any C-contiguous buffer of int64, numpy's among them (numpy's stubs give
# ndarray the buffer protocol only from Python 3.12)
_Int64s = Buffer | np.ndarray[Any, np.dtype[np.int64]]

MAX_SNAP: Final[int]

def next_cut(text: str, tok_start: _Int64s, tok_end: _Int64s, start: int, max_tokens: int,
             overlap: int, floor: int = -1) -> tuple[int, int, int]: ...
def is_boundary(text: str, i: int, floor: int = 0) -> bool: ...
def grapheme_value(c: str) -> int: ...
def is_space(c: str) -> bool: ...
def newline_sync(
    text: str, tok_start: _Int64s, start: int, end: int, after_text: bool = False, at_spaces: bool = False
) -> tuple[int, int, int]: ...
