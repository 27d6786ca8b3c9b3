"""What the ``boundctx serve`` processes of one deployment share: cancels and settings
(docs/decisions/0049).

Behind a load balancer a request reaches any process. A cancel by id can land on one
that does not run the reply, and a ``PATCH`` of settings reaches one process of N. With
its sessions in PostgreSQL (``serve.sessions_dir`` a URL), a deployment coordinates
through that database, with nothing else to run:

- **Replies in flight** are rows of ``boundctx_replies``: the reply's id, the process
  running it (a token of its own), and that process's listening connection (backend pid
  and start time). A cancel of a reply running elsewhere marks its row and sends
  ``NOTIFY boundctx_cancel`` in the same statement; the owner, listening, stops the reply.
  A row whose listening connection is gone is no reply in flight (the process died, and
  PostgreSQL ended the connection with it), so its cancel is the same 404 as an unknown
  id's.
- **Settings changed through the API** are rows of ``boundctx_settings``, numbered by
  ``boundctx_settings_version``. A ``PATCH`` is checked here, written with the overrides
  every process runs with (the version row's lock makes changes one at a time) and
  announced with ``NOTIFY boundctx_settings``, which PostgreSQL delivers once the change
  is committed; every process then reloads them, and a newer version always wins over an
  older one, in whatever order they arrive. A process that starts loads them first. They
  last until a ``PATCH`` puts a key back with null.
- **Nothing missed**: a process that lost its listening connection (a database restart)
  listens again, then catches up — its replies in flight registered under the new
  connection, any cancel asked for meanwhile carried out, the settings reloaded.

A process whose sessions are files has :class:`Coordination`: its own replies and its
own settings, as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from boundctx import config
from boundctx.errors import StoreUnavailable
from boundctx.serve.settings import LiveSettings, SettingRefused, merged_overrides

__all__ = ["Coordination", "DatabaseCoordination"]

log = logging.getLogger("boundctx.serve")

#: The channels the processes listen on.
CANCEL_CHANNEL = "boundctx_cancel"
SETTINGS_CHANNEL = "boundctx_settings"
#: How long a wait for notifications lasts before the listener checks whether it should stop.
LISTEN_TICK_S = 0.25
#: The longest pause between attempts to listen again after losing the database.
MAX_BACKOFF_S = 5.0

# A row's process is alive while its listening connection is: the same backend pid
# started at the same time (a pid alone may be handed to a new connection).
_LIVE = ("EXISTS (SELECT 1 FROM pg_stat_activity a "
         "WHERE a.pid = r.backend AND a.backend_start = r.backend_start)")

#: A reply in flight registered, or registered again, under a listening connection.
_REGISTER = ("INSERT INTO boundctx_replies (id, owner, backend, backend_start) VALUES (%s, %s, %s, %s) "
             "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, backend = excluded.backend, "
             "backend_start = excluded.backend_start")


class Coordination:
    """One process on its own: a cancel reaches its own replies, and a settings change
    applies in it alone (a sessions folder, or a single server)."""

    shared = False

    def __init__(self, live: LiveSettings) -> None:
        self.live = live

    async def registered(self, reply_id: str) -> None:
        """Reply ``reply_id`` runs here from now on (before its id is sent to anyone)."""

    def ended(self, reply_id: str) -> None:
        """Reply ``reply_id`` is over here."""

    def cancel_elsewhere(self, reply_id: str) -> bool:
        """Ask the process running ``reply_id`` to stop it; False when no process runs it."""
        return False

    def patch(self, changes: Mapping[str, Any]) -> config.Settings:
        """Apply a settings change (all or none; :class:`SettingRefused` says why not)."""
        return self.live.patch(changes)

    def close(self) -> None:
        """Stop taking part."""


class DatabaseCoordination(Coordination):
    """The processes on one PostgreSQL database, coordinated through it.

    Parameters
    ----------
    store : PostgresStore
        The sessions store: its pool runs the short statements, and its tables include
        the ones this module reads and writes.
    live : LiveSettings
        This process's settings.
    in_flight : callable
        The ids of the replies running in this process now.
    cancel_here : callable
        Stops one of them (a no-op for an id it does not run).

    Raises
    ------
    StoreUnavailable
        The database cannot be reached to load the shared settings.
    """

    shared = True

    def __init__(self, store: Any, live: LiveSettings, *, in_flight: Callable[[], Collection[str]],
                 cancel_here: Callable[[str], object], listen_timeout_s: float = 10.0) -> None:
        super().__init__(live)
        import psycopg
        from psycopg.types.json import Jsonb

        self._psycopg = psycopg
        self._jsonb = Jsonb
        self.store = store
        self.token = secrets.token_hex(8)
        self._in_flight = in_flight
        self._cancel_here = cancel_here
        self._version = -1
        self._settings_lock = threading.Lock()
        #: ``(pid, backend_start)`` of the listening connection, None while there is none.
        self._listening: tuple[int, Any] | None = None
        self._closing = threading.Event()
        self._ready = threading.Event()
        # One thread for the writes a reply makes, in the order it makes them (its row is
        # added before it can be removed); never the event loop's.
        self._writes = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="boundctx-coordination")
        self.reload_settings()  # the first reply runs with them
        self._listener = threading.Thread(target=self._listen, name="boundctx-listen", daemon=True)
        self._listener.start()
        self._ready.wait(listen_timeout_s)

    # -- replies --------------------------------------------------------------------------

    async def registered(self, reply_id: str) -> None:
        await asyncio.wrap_future(self._writes.submit(self._register, reply_id))

    def _register(self, reply_id: str) -> None:
        listening = self._listening
        if listening is None:
            return  # away from the database: registered when the listener is back
        try:
            with self.store.connection() as conn:
                conn.execute(_REGISTER,
                             (reply_id, self.token, *listening))
        except (StoreUnavailable, self._psycopg.Error) as exc:
            # The reply runs all the same; only a cancel from another process misses it
            # until the listener is back (its catch-up registers it).
            log.warning("boundctx serve: reply %s cannot be cancelled from other processes for now: %s",
                        reply_id, exc)

    def ended(self, reply_id: str) -> None:
        if not self._closing.is_set():
            self._writes.submit(self._unregister, reply_id)

    def _unregister(self, reply_id: str) -> None:
        try:
            with self.store.connection() as conn:
                conn.execute("DELETE FROM boundctx_replies WHERE id = %s AND owner = %s", (reply_id, self.token))
        except (StoreUnavailable, self._psycopg.Error):
            pass  # its row goes when this process listens again (its catch-up)

    def cancel_elsewhere(self, reply_id: str) -> bool:
        """Raises StoreUnavailable when the database cannot be asked."""
        with self.store.connection() as conn:
            rows = conn.execute(
                f"WITH asked AS (UPDATE boundctx_replies r SET cancel_asked = true WHERE id = %s AND {_LIVE} "
                "RETURNING id) SELECT pg_notify(%s, id) FROM asked", (reply_id, CANCEL_CHANNEL)).fetchall()
        return bool(rows)

    # -- settings -------------------------------------------------------------------------

    def patch(self, changes: Mapping[str, Any]) -> config.Settings:
        """Check ``changes``, store them with the shared overrides, and have every process
        run with them from its next reply (this one at once).

        Raises
        ------
        SettingRefused
        StoreUnavailable
        """
        checked = self.live.check(changes)
        with self.store.connection() as conn, conn.transaction():
            # The version row's lock: one change at a time, each over the one before.
            version = conn.execute("UPDATE boundctx_settings_version SET version = version + 1 "
                                   "RETURNING version").fetchone()[0]
            stored = self._checked(conn.execute("SELECT name, value FROM boundctx_settings").fetchall())
            merged = merged_overrides(stored, checked)
            self.live.compose(merged, about=checked)  # refused: nothing is written (the rollback)
            for name, value in checked.items():
                if value is None:
                    conn.execute("DELETE FROM boundctx_settings WHERE name = %s", (name,))
                else:
                    conn.execute("INSERT INTO boundctx_settings (name, value) VALUES (%s, %s) "
                                 "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                                 (name, self._jsonb(value)))
            conn.execute("SELECT pg_notify(%s, %s)", (SETTINGS_CHANNEL, str(version)))
        self._adopt(version, merged)
        return self.live.current

    def reload_settings(self, conn: Any = None) -> None:
        """Run with the shared overrides as the database holds them now."""
        query = ("SELECT v.version, s.name, s.value FROM boundctx_settings_version v "
                 "LEFT JOIN boundctx_settings s ON true")
        if conn is None:
            with self.store.connection() as pooled:
                rows = pooled.execute(query).fetchall()
        else:
            rows = conn.execute(query).fetchall()
        version = rows[0][0] if rows else 0
        self._adopt(version, self._checked([(name, value) for _, name, value in rows if name is not None]))

    def _checked(self, rows: list[tuple[str, Any]]) -> dict[str, Any]:
        """Stored overrides checked again as a change is (the table is the database's, and
        another boundctx version may know other keys): what this process cannot take is
        left out, and said."""
        out: dict[str, Any] = {}
        for name, value in rows:
            try:
                out.update(self.live.check({name: value}))
            except SettingRefused as exc:
                log.warning("boundctx serve: the shared setting %s is not used here: %s", name, exc)
        return out

    def _adopt(self, version: int, overrides: Mapping[str, Any]) -> None:
        with self._settings_lock:
            if version <= self._version:
                return  # an older state, arriving late
            try:
                self.live.adopt(overrides)
            except SettingRefused as exc:  # values this process's own start settings refuse
                log.error("boundctx serve: the shared settings (version %s) do not go together with this "
                          "process's own, which stay as they were: %s", version, exc)
            self._version = version

    # -- listening ------------------------------------------------------------------------

    def _listen(self) -> None:
        backoff = 0.2
        while not self._closing.is_set():
            try:
                conn = self._psycopg.connect(self.store.url, autocommit=True, connect_timeout=5)
            except self._psycopg.Error as exc:
                log.debug("boundctx serve: cannot listen on the sessions database yet: %s", exc)
                self._closing.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            try:
                with conn:
                    # Listening first: a notification sent during the catch-up is not lost.
                    conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                    conn.execute(f"LISTEN {SETTINGS_CHANNEL}")
                    self._listening = conn.execute("SELECT pid, backend_start FROM pg_stat_activity "
                                                   "WHERE pid = pg_backend_pid()").fetchone()
                    self._catch_up(conn)
                    self._ready.set()
                    backoff = 0.2
                    while not self._closing.is_set():
                        # One at a time: the generator holds the connection, and a settings
                        # notification is followed by a query on it.
                        for note in list(conn.notifies(timeout=LISTEN_TICK_S, stop_after=1)):
                            self._heard(conn, note.channel, note.payload)
            except self._psycopg.Error as exc:
                if not self._closing.is_set():
                    log.warning("boundctx serve: lost the sessions database's notifications (%s); listening "
                                "again when it is back", " ".join(str(exc).split()) or type(exc).__name__)
            finally:
                self._listening = None

    def _heard(self, conn: Any, channel: str, payload: str) -> None:
        if channel == CANCEL_CHANNEL:
            self._cancel_here(payload)
        elif channel == SETTINGS_CHANNEL:
            self.reload_settings(conn)

    def _catch_up(self, conn: Any) -> None:
        """After (re)connecting: this process's replies in flight registered under the new
        connection, the cancels asked meanwhile done, rows of dead processes removed, and
        the settings reloaded."""
        running = list(self._in_flight())
        listening = self._listening
        assert listening is not None, "caught up on a listening connection"
        with conn.transaction():
            conn.execute("DELETE FROM boundctx_replies WHERE owner = %s AND NOT (id = ANY(%s))",
                         (self.token, running))
            for reply_id in running:
                conn.execute(_REGISTER,
                             (reply_id, self.token, *listening))
            conn.execute(f"DELETE FROM boundctx_replies r WHERE owner <> %s AND NOT {_LIVE}", (self.token,))
            asked = conn.execute("SELECT id FROM boundctx_replies WHERE owner = %s AND cancel_asked",
                                 (self.token,)).fetchall()
        for (reply_id,) in asked:
            self._cancel_here(reply_id)
        self.reload_settings(conn)

    def close(self) -> None:
        self._closing.set()
        self._listener.join(LISTEN_TICK_S * 8)
        self._writes.shutdown(wait=True)
