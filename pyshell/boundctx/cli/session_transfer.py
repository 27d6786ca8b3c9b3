"""``boundctx session import FILE... --to URL`` and ``boundctx session export ID... --from
URL``: sessions from JSONL files into a PostgreSQL database and back, byte for byte
(issue 30; the store is :mod:`boundctx.stores.postgres`).

Each file or session is one unit of work, done whole or not at all: an import is one
transaction, an export is written beside its file and renamed into place. So a failure
leaves nothing half done, and the command goes on with the others, says which failed and
why, and exits 1, as ``boundctx reindex`` does; once the database is lost, the rest are
said not tried rather than each waiting for it in turn. What stops every unit alike (no psycopg,
a database that does not answer, a URL it cannot read) is said once, before any work,
with exit 2. A password in the URL is never printed: neither in the URL shown nor in the
driver's own messages, which may quote it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from boundctx.cli._dialect import AUTO, add_dialect_argument
from boundctx.cli._progress import byte_progress
from boundctx.errors import StoreUnavailable

if TYPE_CHECKING:
    from boundctx.stores.postgres import ImportReport, PostgresStore

__all__ = ["Transfer", "add_parsers", "export_sessions", "import_files", "open_store"]

#: Seconds a first connection may take before the database is said not to answer, unless
#: the URL (``connect_timeout``) or ``PGCONNECT_TIMEOUT`` says otherwise.
CONNECT_TIMEOUT = 10

_URL_HELP = ("a postgresql:// URL (or a libpq connection string); a password is better kept in PGPASSWORD "
             "or ~/.pgpass than in the URL, which the machine's other users can see in its process list")


def add_parsers(ssub) -> None:
    """``session import`` and ``session export``, under ``boundctx session``."""
    i = ssub.add_parser(
        "import", help="store JSONL transcripts in a PostgreSQL database, one session per file",
        description="Store each FILE in the PostgreSQL database at --to as one session, every byte of it, "
                    "in one transaction per file: a session is there whole or not at all. The session's "
                    "id is the file's name without its extension, or --id. A session that is there "
                    "already is refused unless --replace. `session export` writes it back byte for byte.")
    i.add_argument("files", nargs="+", metavar="FILE")
    i.add_argument("--to", dest="url", required=True, metavar="URL", help=f"the database: {_URL_HELP}")
    i.add_argument("--id", dest="sid", default=None, metavar="ID",
                   help="the session's id (with one FILE only; default: the file's name without .jsonl)")
    i.add_argument("--replace", action="store_true",
                   help="replace a session of the same id, in the same transaction (readers see the old "
                        "session or the whole new one)")
    add_dialect_argument(i, "the transcripts'")
    _add_progress(i)
    i.set_defaults(run=run_import)

    e = ssub.add_parser(
        "export", help="write sessions of a PostgreSQL database back as JSONL files",
        description="Write each session ID of the PostgreSQL database at --from as the JSONL file it was "
                    "imported from, byte for byte (with the lines appended since). Each file is written "
                    "beside its place and renamed into it, so it is the old file or the whole new one.")
    e.add_argument("ids", nargs="+", metavar="ID")
    e.add_argument("--from", dest="url", required=True, metavar="URL", help=f"the database: {_URL_HELP}")
    where = e.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", default=None, metavar="FILE", help="the file to write (with one ID only)")
    where.add_argument("--dir", default=None, metavar="DIR",
                       help="write each session to DIR/ID.jsonl (DIR is made if it is not there)")
    e.add_argument("--force", action="store_true", help="replace a file that is there already")
    _add_progress(e)
    e.set_defaults(run=run_export)


def _add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="force the progress bar on or off (default: on a terminal, for big jobs; off with -q)")


class Transfer(NamedTuple):
    """One file imported or one session exported: ``report`` (an import's
    :class:`~boundctx.stores.postgres.ImportReport`) or ``written`` (an export's bytes)
    when it went through, ``error`` when it did not."""

    file: str
    session: str
    error: str | None = None
    report: ImportReport | None = None
    written: int = 0
    seconds: float = 0.0
    #: the database was lost during it (the rest are not tried)
    lost: bool = False


# -- the database ----------------------------------------------------------------------------

def redacted(text: str) -> str:
    """The store's :func:`~boundctx.stores.postgres.redacted`, loaded when first needed
    (the store module brings numpy, which ``boundctx --help`` does without)."""
    from boundctx.stores.postgres import redacted as hide

    return hide(text)


def _first_line(exc: BaseException) -> str:
    return redacted(next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__))


def open_store(url: str) -> PostgresStore:
    """The store at ``url``, once a connection has been made to it.

    Raises
    ------
    RuntimeError
        psycopg is not installed (the message says what to install), or the database
        holds another schema version.
    ConnectionError
        The database does not answer, or refuses the connection (which URL, the driver's
        reason, and what to check).
    ValueError
        ``url`` is no URL or connection string psycopg reads.
    """
    from boundctx.stores.postgres import PostgresStore, _psycopg

    psycopg, _pool = _psycopg()
    shown = redacted(url)
    try:
        given = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"{shown!r} is no PostgreSQL URL: {_first_line(exc)}; write one as "
                         "postgresql://USER@HOST:PORT/DATABASE") from None
    # The store's pool retries a database that does not answer until its timeout, and
    # then asks why: one plain connection first says why at once, in the driver's words.
    wait = {} if "connect_timeout" in given or "PGCONNECT_TIMEOUT" in os.environ else {
        "connect_timeout": CONNECT_TIMEOUT}
    try:
        psycopg.connect(url, **wait).close()
        return PostgresStore(url, pool_size=1)
    except psycopg.OperationalError as exc:
        raise ConnectionError(f"cannot connect to the database at {shown}: {_first_line(exc)}; check that "
                              "the server runs and takes connections there, and the URL's host, port, "
                              "database, user and password") from None
    except psycopg.Error as exc:
        raise ConnectionError(f"cannot use the database at {shown}: {_first_line(exc)}") from None


def _error(exc: BaseException) -> str:
    """An error's message in one line, without ``[Errno 2]`` in front or a password in it."""
    if isinstance(exc, OSError) and exc.strerror:
        message = exc.strerror + (f": {exc.filename!r}" if exc.filename else "")
    else:
        message = str(exc)
    return " ".join(redacted(message).split())


_NOT_TRIED = "not tried: the database was lost"


def _failures() -> tuple[type[BaseException], ...]:
    """What fails one file or session and not the others."""
    from boundctx.errors import BoundctxError
    from boundctx.stores.postgres import _psycopg

    return BoundctxError, OSError, ValueError, _psycopg()[0].Error


def _attempt(path: str, sid: str, failures: tuple, move: Callable[[], Any]) -> Transfer:
    """One import or export (``move()``: an ImportReport, or the bytes written), as the
    Transfer it makes: done, failed saying why, or failed because the database was lost
    (``lost``: the rest are not tried)."""
    start = time.perf_counter()
    try:
        result = move()
    except FileExistsError:
        return Transfer(path, sid, error=f"session {sid!r} is in the database already; --replace replaces it, "
                                         "or --id stores the file under another id")
    except StoreUnavailable as exc:
        return Transfer(path, sid, error=_error(exc), lost=True)
    except failures as exc:
        return Transfer(path, sid, error=_error(exc))
    seconds = time.perf_counter() - start
    if isinstance(result, int):
        return Transfer(path, sid, written=result, seconds=seconds)
    return Transfer(path, sid, report=result, seconds=seconds)


# -- import ----------------------------------------------------------------------------------


def import_files(url: str, files: list[str], *, sid: str | None = None, dialect: str = AUTO,
                 replace: bool = False, progress: bool | None = None) -> list[Transfer]:
    """Import each of ``files`` as one session of the database at ``url`` (id: ``sid``,
    with one file only, else the file's name without its extension); one
    :class:`Transfer` per file, in order. ``progress``: force the bar on or off (default:
    a big job on a terminal). Raises what :func:`open_store` raises, and ValueError for
    ``sid`` with several files, before any work."""
    if sid is not None and len(files) != 1:
        raise ValueError(f"--id names one session, and {len(files)} files were given")
    done: list[Transfer] = []
    with open_store(url) as store:
        failures = _failures()
        sizes = [os.path.getsize(f) if os.path.isfile(f) else 0 for f in files]
        base = 0
        lost = False
        with byte_progress(sum(sizes), "import", enabled=progress) as report:
            for f, size in zip(files, sizes):
                name = sid if sid is not None else os.path.splitext(os.path.basename(f))[0]
                if lost:
                    done.append(Transfer(f, name, error=_NOT_TRIED))
                    continue
                if not os.path.exists(f):
                    done.append(Transfer(f, name, error="no such file"))
                    continue
                if not os.path.isfile(f):
                    done.append(Transfer(f, name, error="is a folder or a device, not a JSONL file"))
                    continue
                done.append(_attempt(f, name, failures, lambda: store.import_jsonl(
                    name, f, dialect=dialect, replace=replace, progress=lambda n, _total: report(base + n))))
                lost = done[-1].lost
                base += size
                report(base)
    return done


def run_import(args) -> int:
    return _run("import", lambda: import_files(args.url, args.files, sid=args.sid, dialect=args.dialect or AUTO,
                                               replace=args.replace, progress=_progress(args)))


# -- export ----------------------------------------------------------------------------------


def export_sessions(url: str, ids: list[str], *, out: str | None = None, folder: str | None = None,
                    force: bool = False, progress: bool | None = None) -> list[Transfer]:
    """Write each session of ``ids`` in the database at ``url`` to ``out`` (one id only)
    or ``folder``/ID.jsonl (the folder made if need be); one :class:`Transfer` per
    session, in order. A file there already is left as it is unless ``force``. Raises
    what :func:`open_store` raises, and ValueError for ``out`` with several ids (or
    neither ``out`` nor ``folder``), before any work."""
    if (out is None) == (folder is None):
        raise ValueError("give one of --out FILE and --dir DIR")
    if out is not None and len(ids) != 1:
        raise ValueError(f"--out names one file, and {len(ids)} sessions were given; use --dir DIR")
    done: list[Transfer] = []
    with open_store(url) as store:
        failures = _failures()
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
        lost = False
        for sid in ids:
            if lost:
                done.append(Transfer("", sid, error=_NOT_TRIED))
                continue
            if out is None and (sid in ("", ".", "..") or os.path.basename(sid) != sid or "\0" in sid):
                done.append(Transfer("", sid, error=f"the id {sid!r} is no file name; export it alone with "
                                                    "--out FILE"))
                continue
            path = out if out is not None else os.path.join(folder or "", sid + ".jsonl")
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                done.append(Transfer(path, sid, error=f"no folder {parent!r} to write {path!r} in"))
                continue
            if os.path.lexists(path) and not force:
                done.append(Transfer(path, sid, error=f"{path!r} is there already; --force replaces it"))
                continue
            with contextlib.ExitStack() as stack:
                bar = None

                # The store says the session's size with its first report: the bar starts then.
                def report(n: int, total: int) -> None:
                    nonlocal bar
                    if bar is None:
                        bar = stack.enter_context(byte_progress(total, f"export {sid}", enabled=progress))
                    bar(n)

                done.append(_attempt(path, sid, failures, lambda: store.export_jsonl(sid, path, progress=report)))
                lost = done[-1].lost
    return done


def run_export(args) -> int:
    return _run("export", lambda: export_sessions(args.url, args.ids, out=args.out, folder=args.dir,
                                                  force=args.force, progress=_progress(args)))


# -- both --------------------------------------------------------------------------------------


def _progress(args) -> bool | None:
    if args.progress is not None:
        return args.progress
    return False if getattr(args, "verbosity", 0) < 0 else None  # -q: no bar


def _run(verb: str, work: Callable[[], list[Transfer]]) -> int:
    try:
        done = work()
    except (RuntimeError, ConnectionError, ValueError, OSError) as exc:  # before any work
        print(f"boundctx session {verb}: {_error(exc)}", file=sys.stderr)
        return 2
    for t in done:
        if t.error is not None:
            print(f"{t.file if verb == 'import' else 'session ' + repr(t.session)}: FAILED: {t.error}",
                  file=sys.stderr)
        elif t.report is not None:
            r = t.report
            extra = f", {r.torn_bytes} torn bytes at the end" if r.torn_bytes else ""
            print(f"{t.file}: session {t.session!r}, {r.messages} messages, {r.compactions} compactions, "
                  f"{r.lines} lines, {r.bytes} bytes{extra} ({t.seconds * 1000:.1f} ms)")
        else:
            print(f"session {t.session!r}: {t.file}, {t.written} bytes ({t.seconds * 1000:.1f} ms)")
    failed = sum(t.error is not None for t in done)
    if failed:
        print(f"{failed} of {len(done)} failed", file=sys.stderr)
    return 1 if failed else 0
