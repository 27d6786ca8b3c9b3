from collections.abc import Callable
from typing import Final

from typing_extensions import Buffer

MESSAGE: Final[int]
COMPACTION: Final[int]
OTHER: Final[int]
CORRUPT: Final[int]
BLANK: Final[int]
UNDECIDED: Final[int]
DEFAULT_CLASSIFY_WINDOW: Final[int]
DEFAULT_BLOCK_SIZE: Final[int]
MAX_SCAN_THREADS: Final[int]
MIN_PART_BYTES: Final[int]
BUILT_WITH_CHECKS: Final[bool]

class QualifiedKind(int):
    def __new__(cls, kind: int, path: str, *values: str) -> QualifiedKind: ...
    @property
    def path(self) -> str: ...
    @property
    def values(self) -> tuple[str, ...]: ...

class DialectTable:
    def __init__(self, kinds: dict[str, int]) -> None: ...

class ScanResult:
    starts: bytes
    kinds: bytes
    indexed_end: int
    scanned_end: int
    @property
    def torn_bytes(self) -> int: ...

def scan_bytes(
    data: Buffer, dialect: DialectTable, *, base_offset: int = 0, classify_window: int = ...
) -> ScanResult: ...
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
) -> ScanResult: ...
def sequence_lines(kinds: Buffer, line0: int = 0) -> tuple[bytes, bytes]: ...
