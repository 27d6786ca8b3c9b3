"""Where sessions live besides a folder of JSONL files.

The folder is the embedded default and the format of record (a session is its
:class:`~boundctx.transcript.Transcript`); :mod:`boundctx.stores.postgres` keeps the same
sessions in PostgreSQL, for a deployment that outgrows one machine (docs/decisions/0048).
Both are read and written by one contract, which the store tests run against each.
"""

from __future__ import annotations

import re

__all__ = ["DATABASE_SCHEMES", "SESSION_ID", "database_session", "is_database_url"]

#: A session's id: a name, never a path (a file ``<id>.jsonl``, or a row's key).
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: What a target begins with when it names a database, not a folder or a file.
DATABASE_SCHEMES = ("postgresql://", "postgres://")


def is_database_url(target: str) -> bool:
    return target.startswith(DATABASE_SCHEMES)


def database_session(target: str) -> tuple[str, str] | None:
    """``(url, id)`` of a session named as ``postgresql://...#ID``; None for anything that
    is not a database URL (a file's path).

    Raises
    ------
    ValueError
        A database URL without a valid session id after its ``#``.
    """
    if not is_database_url(target):
        return None
    url, hash_, sid = target.rpartition("#")
    if not hash_ or not SESSION_ID.fullmatch(sid):
        raise ValueError("a session in a database is named URL#ID, e.g. postgresql://host/boundctx#my-chat: the "
                         "id after # is 1 to 128 letters, digits, '_' or '-'")
    return url, sid
