from typing import Final

from typing_extensions import Buffer

DISPLAY_DEPTH: Final[int]

def project_display(
    prefix: Buffer, total_len: int, content_limit: int
) -> tuple[bytes | None, int, int]: ...
def escape_line_separators(data: bytes) -> bytes: ...
def count_openers(data: Buffer, start: int, end: int) -> int: ...
