from collections.abc import Sequence
from typing import Final

import numpy as np
from typing_extensions import Buffer

_Ints = Buffer | np.ndarray

SLOT_ID: Final[int]
SLOT_PARENT: Final[int]
SLOT_LOGICAL: Final[int]
SLOT_SOURCE: Final[int]
SLOTS: Final[int]
LINK_ABSENT: Final[int]
LINK_NULL: Final[int]
ROOT: Final[int]
COPY: Final[int]
FANOUT_SPAN: Final[int]
LONGEST_LINKED_LINE: Final[int]
SIMD_AVAILABLE: Final[bool]

class IdTable:
    def __init__(self, expected: int = 0) -> None: ...
    def __len__(self) -> int: ...
    def lookup(self, key: int) -> int: ...
    def add_ids(self, ids: _Ints, line0: int) -> None: ...

def use_simd(on: bool) -> bool: ...
def line_links(
    data: _Ints, starts: _Ints, first: int, count: int, end: int, base: int,
    keys: Sequence[tuple[bytes, int]],
) -> bytes: ...
def hang_lines(
    links: _Ints, table: IdTable, line0: int, up_before: _Ints, last_kept: int
) -> tuple[bytes, bytes]: ...
def hangs_as_chain(up: _Ints, line0: int) -> bool: ...
def place_lines(
    up: _Ints, kinds: _Ints, line0: int, ref_lines: _Ints, ref_pos: _Ints, ref_tip: _Ints,
    ref_comp: _Ints,
) -> tuple[bytes, bytes, bytes]: ...
def reads_as_list(
    kinds: _Ints, pos: _Ints, comp: _Ints, up: _Ints, line0: int, messages_before: int,
    compaction_before: int,
) -> bool: ...
def branch_lines(tip: _Ints, up: _Ints, lo: int, start: int, limit: int) -> tuple[bytes, bool]: ...
def id_index(ids: _Ints, up: _Ints, line0: int) -> tuple[bytes, bytes]: ...
