from collections.abc import Callable, Sequence
from typing import Final

from boundctx._native.lineindex import DialectTable, ScanResult

DEFAULT_BLOCK_SIZE: Final[int]
MAX_SCAN_THREADS: Final[int]
MIN_PART_BYTES: Final[int]
BUILT_WITH_CHECKS: Final[bool]

def scan_fd(
    fd: int,
    dialect: DialectTable,
    *,
    start: int = 0,
    end: int = -1,
    classify_window: int = ...,
    block_size: int = ...,
    threads: int = 0,
    min_part: int = ...,
    progress: Callable[[int], object] | None = None,
    link_keys: Sequence[tuple[bytes, int]] | None = None,
    link_limit: int = ...,
) -> ScanResult: ...
