from typing import Final

from typing_extensions import Buffer

MESSAGE: Final[int]
COMPACTION: Final[int]
OTHER: Final[int]
CORRUPT: Final[int]
BLANK: Final[int]
UNDECIDED: Final[int]
DEFAULT_CLASSIFY_WINDOW: Final[int]
BUILT_WITH_CHECKS: Final[bool]
SIMD_AVAILABLE: Final[bool]

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
    links: bytes | None
    def __init__(
        self, starts: bytes, kinds: bytes, indexed_end: int, scanned_end: int, links: bytes | None = None
    ) -> None: ...
    @property
    def torn_bytes(self) -> int: ...

def scan_bytes(
    data: Buffer, dialect: DialectTable, *, base_offset: int = 0, classify_window: int = ...
) -> ScanResult: ...
def sequence_lines(kinds: Buffer, line0: int = 0) -> tuple[bytes, bytes]: ...
def rises_within(values: Buffer, low: int, high: int) -> bool: ...
def use_simd(on: bool) -> bool: ...
