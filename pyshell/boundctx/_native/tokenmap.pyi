from typing import Any

import numpy as np
from typing_extensions import Buffer

# int64 arrays: any C-contiguous buffer of int64, numpy's among them (numpy's stubs give
# ndarray the buffer protocol only from Python 3.12)
_Int64s = Buffer | np.ndarray[Any, np.dtype[np.int64]]

def utf8_length(text: str) -> int: ...
def code_point_byte_offsets(text: str, out: _Int64s) -> None: ...
def token_spans(text: str, piece_bytes: _Int64s, cp_start: _Int64s, cp_end: _Int64s) -> int: ...
