"""The ``Ledger`` of one case: opening (one cached database per URL, schema made once),
write transactions, and the reads the verdict and the fakes make."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from killdrill.alloc import without_gc
from killdrill.canonical import json_reader
from killdrill.ledger import _statements as statements
from killdrill.ledger._db import Database, SqlConnection, open_database, unusable
from killdrill.ledger._schema import (
    ADDED_COLUMNS,
    IN_FLIGHT,
    LEDGER_FORMAT,
    SCHEMA,
    KeyState,
    LedgerError,
    _to_url,
    ledger_path,
)
from killdrill.ledger._substitute import Substitution
from killdrill.ledger._tx import Tx
from killdrill.records import Call, InFlight, LedgerSnapshot

_databases: dict[str, Database] = {}
_file_ids: dict[str, tuple[int, int] | None] = {}  # SQLite file identity each cached database was opened on
_ready: set[str] = set()
_databases_lock = threading.Lock()


def _forget_databases_after_fork() -> None:
    # Pooled connections must never be shared with a forked child.
    global _databases_lock
    for db in _databases.values():
        db.forget_after_fork()
    _databases.clear()
    _file_ids.clear()
    _ready.clear()
    _databases_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_databases_after_fork)


def _pool(url: str, read_only: bool = False, durable: bool = True) -> str:
    """The key of ``url``'s pool of connections: the writers' is ``url`` itself, the readers'
    and the writers without fsync have their own."""
    return f"{url}\0read-only" if read_only else url if durable else f"{url}\0no-fsync"


_POOLS = ((False, True), (True, True), (False, False))  # (read_only, durable) of every pool


def _same(value: Any) -> Any:
    return value


def _parsed(text: str, value: Any) -> Any:
    return value


class Ledger:
    """The calls and state of one case (``thread``) in a SQLite file or a database URL."""

    def __init__(
        self, url: str | os.PathLike[str], thread: str, *, read_only: bool = False, durable: bool = True
    ) -> None:
        """``read_only``: for a SQLite file that exists and is a ledger, a connection that cannot
        write: the harness reading a case (its close checkpoints no WAL, with no fsync).
        ``durable=False``: a SQLite file's commits and checkpoints skip the fsync (the harness's
        marker in a case's new ledger: a machine that crashes voids the case anyway)."""
        self.url, self.path = _to_url(url)
        self.thread = thread
        self.where = self.path or _hide_password(self.url)
        self.read_only = read_only and self.path is not None
        self.durable = durable or self.path is None
        self._cached = _pool(self.url, self.read_only, self.durable)  # its own pool
        self.db = self._database()
        self.dialect = self.db.dialect

    @classmethod
    def in_workdir(cls, workdir: str | os.PathLike[str], thread: str) -> Ledger:
        """The ledger of a case's workdir (``<workdir>/.killdrill/ledger.sqlite``)."""
        return cls(ledger_path(workdir), thread)

    def __repr__(self) -> str:
        return f"Ledger({self.where!r}, thread={self.thread!r})"

    # -- opening ------------------------------------------------------------------------------
    def _fail(self, why: object) -> LedgerError:
        text = " ".join(str(why).split())
        return LedgerError(f"killdrill: ledger {self.where} is unusable: {text}")

    @staticmethod
    def _file_id(path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _database(self) -> Database:
        with _databases_lock:
            db = _databases.get(self._cached)
            if db is not None and self.path is not None:
                # A file deleted and made anew at the same path (a reused workdir) must not be read
                # through connections still open on the old one.
                was, now = _file_ids.get(self._cached), self._file_id(self.path)
                if was is not None and was != now:
                    self._forget()
                    db = None
            if db is None:
                if self.path is not None:
                    if os.path.isdir(self.path):
                        raise self._fail("it is a directory")
                    if not self.read_only:
                        os.makedirs(os.path.dirname(self.path), exist_ok=True)
                try:
                    db = open_database(self.url, self.path, self.read_only, self.durable)
                except Exception as e:
                    if unusable(e):
                        raise self._fail(e) from None
                    raise
                _databases[self._cached] = db
            if self._cached not in _ready:
                with self._first_open_lock():
                    self._prepare(db)
                _ready.add(self._cached)
            if self.path is not None and _file_ids.get(self._cached) is None:
                _file_ids[self._cached] = self._file_id(self.path)
        return db

    @contextlib.contextmanager
    def _first_open_lock(self) -> Iterator[None]:
        """Serialize processes opening a SQLite file for the first time (flock on its folder).

        SQLite answers "database is locked" at once, without waiting out busy_timeout, to a
        connection that switches a new file to WAL while another process is doing the same; measured
        6 of 40 races of 8 fresh writers. Holding the folder's lock while the schema is checked or made
        turns that race into a short queue.
        """
        if self.path is None or self.read_only:  # a reader makes nothing
            yield
            return
        fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _forget(self) -> None:
        for cached in (_pool(self.url, *kind) for kind in _POOLS):
            db = _databases.pop(cached, None)
            _file_ids.pop(cached, None)
            _ready.discard(cached)
            if db is not None:
                db.dispose()

    def close(self) -> None:
        """Close the pooled connections of this ledger's URL, all its pools (a harness reading
        many cases keeps no files open: the HTTP and SMTP fakes it serves write through the
        writers' pool, and a case is read through the readers')."""
        with _databases_lock:
            self._forget()

    def _prepare(self, db: Database) -> None:
        """Create the schema once per database, safely when several processes race to do it."""
        try:
            with db.read() as conn:
                if self._schema_ok(conn, db.dialect):
                    return
            if self.read_only:
                raise self._fail("it holds no ledger tables (deleted and made anew?)")
            with db.write() as conn:  # SQLite: BEGIN IMMEDIATE, so one process creates, others wait
                if db.dialect == "postgresql":
                    conn.execute("SELECT pg_advisory_xact_lock(7241063)")
                if self._schema_ok(conn, db.dialect):
                    return
                if db.dialect == "sqlite":
                    foreign = [
                        row["name"]
                        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                        if not row["name"].startswith(("killdrill_", "sqlite_"))
                    ]
                    if foreign:
                        raise self._fail(
                            "it is a SQLite database but not a killdrill ledger "
                            f"(tables: {', '.join(sorted(foreign)[:5])})"
                        )
                for statement in SCHEMA:
                    conn.execute(statement)
                for (table, column), sql_type in ADDED_COLUMNS.items():
                    if not self._has_column(conn, db.dialect, table, column):
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")
                conn.execute(
                    "INSERT INTO killdrill_meta (name, value) VALUES ('format', :format)"
                    " ON CONFLICT (name) DO NOTHING",
                    {"format": LEDGER_FORMAT},
                )
        except LedgerError:
            raise
        except db.errors as e:
            raise self._fail(getattr(e, "orig", None) or e) from None

    def _schema_ok(self, conn: SqlConnection, dialect: str) -> bool:
        if dialect == "sqlite":  # one cheap query instead of an inspector (every agent start)
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'killdrill_meta'"
            )
        else:
            found = conn.execute(
                "SELECT 1 FROM information_schema.tables"
                " WHERE table_name = 'killdrill_meta' AND table_schema = current_schema()"
            )
        if not found:
            return False
        rows = conn.execute("SELECT value FROM killdrill_meta WHERE name = 'format'")
        if not rows:
            return False
        value = rows[0]["value"]
        if value != LEDGER_FORMAT:
            raise self._fail(f"ledger format {value!r}, this killdrill reads {LEDGER_FORMAT!r}")
        # A ledger written before a column was added gets it (under the write lock, see _prepare).
        return all(self._has_column(conn, dialect, t, c) for t, c in ADDED_COLUMNS)

    @staticmethod
    def _has_column(conn: SqlConnection, dialect: str, table: str, column: str) -> bool:
        if dialect == "sqlite":
            found = conn.execute(
                "SELECT 1 FROM pragma_table_info(:table) WHERE name = :column",
                {"table": table, "column": column},
            )
        else:
            found = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = :table"
                " AND column_name = :column AND table_schema = current_schema()",
                {"table": table, "column": column},
            )
        return bool(found)

    # -- transactions -------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """One write transaction holding this thread's lock; committed on exit, rolled back on error."""
        try:
            with self.db.write() as conn:
                yield Tx(conn, self.thread)
        except self.db.errors as e:
            raise self._fail(getattr(e, "orig", None) or e) from None

    @contextlib.contextmanager
    def _read(self) -> Iterator[SqlConnection]:
        try:
            with self.db.read() as conn:
                yield conn
        except self.db.errors as e:
            raise self._fail(getattr(e, "orig", None) or e) from None

    # -- read API -----------------------------------------------------------------------------
    def calls(self, provider: str | None = None, op: str | None = None) -> list[Call]:
        """This thread's calls in sequence order, optionally only one provider / op."""
        with self._read() as conn:
            return self._calls(conn, provider, op)

    def _calls(
        self,
        conn: SqlConnection,
        provider: str | None,
        op: str | None,
        after: int | None = None,
        sub: Substitution | None = None,
    ) -> list[Call]:
        where, params = "thread = :thread", dict[str, Any](thread=self.thread)
        if after is not None:
            where, params["after"] = where + " AND seq > :after", after
        if provider is not None:
            where, params["provider"] = where + " AND provider = :provider", provider
        if op is not None:
            where, params["op"] = where + " AND op = :op", op
        loads = json_reader()
        key_, json_ = (sub.key, sub.json) if sub is not None else (_same, _parsed)
        # by position, in the SELECT's order: a name lookup per column was a third of a read
        return [
            Call(
                seq,
                provider,
                op_,
                key_(key),
                json_(payload, loads(payload)),
                outcome,
                effect_id,
                attempt,
                pid,
                time_,
                json_(context, loads(context)) if context else None,
            )
            for seq, provider, op_, key, payload, outcome, effect_id, attempt, pid, time_, context in (
                conn.values(
                    "SELECT seq, provider, op, key, payload, outcome, effect_id, attempt, pid, time, context"
                    f" FROM killdrill_calls WHERE {where} ORDER BY seq",
                    params,
                )
            )
        ]

    @without_gc  # 10^5 rows: the collector's passes were a third of the read
    def snapshot(
        self, since: LedgerSnapshot | None = None, written_as: Mapping[str, str] | None = None
    ) -> LedgerSnapshot:
        """Calls in order, final kv state and keys still in flight, read in one consistent view.

        ``written_as``: strings written back as placeholders (old -> new) in keys, payloads and
        state, as the rows are parsed (see killdrill.ledger._substitute).  ``since``: this
        ledger's snapshot read before (after the previous attempt) with the same ``written_as``.
        When every call of it is still there (same seq, provider, op, key and attempt) only the
        calls after it are parsed, and its own are kept: a case read its ledger whole after
        every attempt.  When any is gone, the whole ledger is read, as it is now."""
        sub = Substitution(written_as) if written_as else None
        with self._read() as conn:
            calls = None
            if since is not None and since.calls:
                calls = self._calls_since(conn, since.calls, sub)
            if calls is None:
                calls = self._calls(conn, None, None, sub=sub)
            state = {
                r["key"]: json.loads(r["value"])
                for r in conn.execute(
                    "SELECT key, value FROM killdrill_kv WHERE thread = :thread ORDER BY key",
                    {"thread": self.thread},
                )
            }
            in_flight = tuple(
                InFlight(
                    provider=r["provider"], op=r["op"], key=r["key"], attempt=r["attempt"], since=r["since"]
                )
                for r in conn.execute(
                    "SELECT provider, op, key, attempt, since FROM killdrill_keys"
                    " WHERE thread = :thread AND status = :status ORDER BY since",
                    {"thread": self.thread, "status": IN_FLIGHT},
                )
            )
        snap = LedgerSnapshot(calls=tuple(calls), state=state, in_flight=in_flight)
        return snap if sub is None else sub.rest(snap)

    def _calls_since(
        self, conn: SqlConnection, before: tuple[Call, ...], sub: Substitution | None
    ) -> list[Call] | None:
        """``before`` and the calls after its last, or None when ``before`` is not what is there."""
        last = before[-1].seq
        there = conn.values(
            "SELECT seq, provider, op, key, attempt FROM killdrill_calls"
            " WHERE thread = :thread AND seq <= :last ORDER BY seq",
            {"thread": self.thread, "last": last},
        )
        key = sub.key if sub is not None else _same
        if [(s, p, o, key(k), a) for s, p, o, k, a in there] != [
            (c.seq, c.provider, c.op, c.key, c.attempt) for c in before
        ]:
            return None
        return [*before, *self._calls(conn, None, None, after=last, sub=sub)]

    def kv_get(self, key: str, default: Any = None) -> Any:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT value FROM killdrill_kv WHERE thread = :thread AND key = :key",
                {"thread": self.thread, "key": key},
            )
        return json.loads(rows[0]["value"]) if rows else default

    def counter_value(self, name: str) -> int:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT value FROM killdrill_counters WHERE thread = :thread AND name = :name",
                {"thread": self.thread, "name": "value:" + name},
            )
        return int(rows[0]["value"]) if rows else 0

    def effect(self, provider: str, effect_id: str) -> dict[str, Any] | None:
        """The provider's current record of one effect (a charge, a message, a reservation)."""
        with self._read() as conn:
            return statements.effect(conn, self.thread, provider, effect_id)

    def effects(self, provider: str, ref: str | None = None) -> list[dict[str, Any]]:
        """A provider's effects by id (creation order per prefix), optionally those with a client ``ref``."""
        where, params = (
            "thread = :thread AND provider = :provider",
            {"thread": self.thread, "provider": provider},
        )
        if ref is not None:
            where, params["ref"] = where + " AND ref = :ref", ref
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT data FROM killdrill_effects WHERE {where} ORDER BY effect_id", params
            )
        return [json.loads(r["data"]) for r in rows]

    def key(self, provider: str, key: str) -> KeyState | None:
        """What the provider remembers of an idempotency key (expired keys included)."""
        with self._read() as conn:
            row = statements.key_row(conn, self.thread, provider, key)
        return None if row is None else KeyState.from_row(provider, key, row)

    def settings(self, provider: str) -> dict[str, Any]:
        """A provider's persisted fault settings (and the fault budgets still unused)."""
        with self._read() as conn:
            return statements.settings(conn, self.thread, provider)

    def configure(self, provider: str, **settings: Any) -> dict[str, Any]:
        """Merge fault settings for ``provider`` into the ledger, so they survive restarts."""
        with self.transaction() as tx:  # the thread's lock: a concurrent call sees old or new, never half
            data = tx.settings(provider)
            data.update(settings)
            tx.set_settings(provider, data)
        return data


def _hide_password(url: str) -> str:
    """``url`` as shown in messages: ``scheme://user:***@host/db``."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
