"""The ``Ledger`` of one case: opening (one cached engine per database, schema made once),
write transactions, and the reads the verdict and the fakes make."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine

from killdrill.ledger._schema import (
    IN_FLIGHT,
    LEDGER_FORMAT,
    KeyState,
    LedgerError,
    _make_engine,
    _to_url,
    calls_t,
    counters_t,
    effects_t,
    keys_t,
    kv_t,
    ledger_path,
    meta_t,
    metadata,
    settings_t,
)
from killdrill.ledger._tx import Tx
from killdrill.records import Call, InFlight, LedgerSnapshot

_engines: dict[str, Engine] = {}
_file_ids: dict[str, tuple[int, int] | None] = {}  # SQLite file identity each cached engine was opened on
_ready: set[str] = set()
_engines_lock = threading.Lock()


def _forget_engines_after_fork() -> None:
    # Pooled connections must never be shared with a forked child.
    global _engines_lock
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()
    _file_ids.clear()
    _ready.clear()
    _engines_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_engines_after_fork)


class Ledger:
    """The calls and state of one case (``thread``) in a SQLite file or a database URL."""

    def __init__(self, url: str | os.PathLike[str], thread: str) -> None:
        self.url, self.path = _to_url(url)
        self.thread = thread
        self.where = self.path or sa.engine.make_url(self.url).render_as_string(hide_password=True)
        self.engine = self._engine()
        self.dialect = self.engine.dialect.name

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

    def _engine(self) -> Engine:
        with _engines_lock:
            engine = _engines.get(self.url)
            if engine is not None and self.path is not None:
                # A file deleted and made anew at the same path (a reused workdir) must not be read
                # through connections still open on the old one.
                was, now = _file_ids.get(self.url), self._file_id(self.path)
                if was is not None and was != now:
                    self._forget()
                    engine = None
            if engine is None:
                if self.path is not None:
                    if os.path.isdir(self.path):
                        raise self._fail("it is a directory")
                    os.makedirs(os.path.dirname(self.path), exist_ok=True)
                try:
                    engine = _make_engine(self.url)
                except (exc.ArgumentError, exc.NoSuchModuleError, ImportError) as e:
                    raise self._fail(e) from None
                _engines[self.url] = engine
            if self.url not in _ready:
                with self._first_open_lock():
                    self._prepare(engine)
                _ready.add(self.url)
            if self.path is not None and _file_ids.get(self.url) is None:
                _file_ids[self.url] = self._file_id(self.path)
        return engine

    @contextlib.contextmanager
    def _first_open_lock(self) -> Iterator[None]:
        """Serialize processes opening a SQLite file for the first time (flock on its folder).

        SQLite answers "database is locked" at once, without waiting out busy_timeout, to a
        connection that switches a new file to WAL while another process is doing the same; measured
        6 of 40 races of 8 fresh writers. Holding the folder's lock while the schema is checked or made
        turns that race into a short queue.
        """
        if self.path is None:
            yield
            return
        fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _forget(self) -> None:
        engine = _engines.pop(self.url, None)
        _file_ids.pop(self.url, None)
        _ready.discard(self.url)
        if engine is not None:
            engine.dispose()

    def close(self) -> None:
        """Close this ledger's pooled connections (a harness reading many cases keeps no files open)."""
        with _engines_lock:
            self._forget()

    def _prepare(self, engine: Engine) -> None:
        """Create the schema once per database, safely when several processes race to do it."""
        try:
            with engine.connect() as conn, conn.execution_options(kd_read=True).begin():
                if self._schema_ok(conn):
                    return
            with engine.begin() as conn:  # SQLite: BEGIN IMMEDIATE, so one process creates, others wait
                if engine.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(7241063)"))
                if self._schema_ok(conn):
                    return
                if self.path is not None:
                    foreign = [
                        n for n in sa.inspect(conn).get_table_names() if not n.startswith("killdrill_")
                    ]
                    if foreign:
                        raise self._fail(
                            "it is a SQLite database but not a killdrill ledger "
                            f"(tables: {', '.join(sorted(foreign)[:5])})"
                        )
                metadata.create_all(conn, checkfirst=True)
                conn.execute(meta_t.insert().values(name="format", value=LEDGER_FORMAT))
        except LedgerError:
            raise
        except exc.SQLAlchemyError as e:
            raise self._fail(getattr(e, "orig", None) or e) from None

    def _schema_ok(self, conn: Connection) -> bool:
        if conn.dialect.name == "sqlite":  # one cheap query instead of an inspector (every agent start)
            found = conn.exec_driver_sql(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'killdrill_meta'"
            ).first()
            if found is None:
                return False
        elif not sa.inspect(conn).has_table("killdrill_meta"):
            return False
        value = conn.execute(sa.select(meta_t.c.value).where(meta_t.c.name == "format")).scalar()
        if value is None:
            return False
        if value != LEDGER_FORMAT:
            raise self._fail(f"ledger format {value!r}, this killdrill reads {LEDGER_FORMAT!r}")
        return True

    # -- transactions -------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """One write transaction holding this thread's lock; committed on exit, rolled back on error."""
        try:
            with self.engine.begin() as conn:
                yield Tx(self, conn)
        except exc.OperationalError as e:
            raise self._fail(getattr(e, "orig", e)) from None

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(kd_read=True)
                with conn.begin():
                    yield conn
        except exc.DatabaseError as e:
            raise self._fail(getattr(e, "orig", e)) from None

    def _insert_or_update(
        self, table: sa.Table, values: dict[str, Any], keys: list[str], set_: dict[str, Any]
    ) -> sa.Insert:
        """INSERT ... ON CONFLICT (keys) DO UPDATE: each dialect has its own construct for it."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects import postgresql

            pg_stmt = postgresql.insert(table).values(**values)
            return pg_stmt.on_conflict_do_update(index_elements=keys, set_=set_)
        from sqlalchemy.dialects import sqlite

        lite_stmt = sqlite.insert(table).values(**values)
        return lite_stmt.on_conflict_do_update(index_elements=keys, set_=set_)

    def _upsert(self, conn: Connection, table: sa.Table, pk: dict[str, Any], values: dict[str, Any]) -> None:
        conn.execute(self._insert_or_update(table, {**pk, **values}, list(pk), values))

    def _upsert_counter(self, conn: Connection, name: str, by: int) -> int:
        stmt = self._insert_or_update(
            counters_t,
            {"thread": self.thread, "name": name, "value": by},
            ["thread", "name"],
            {"value": counters_t.c.value + by},
        )
        return int(conn.execute(stmt.returning(counters_t.c.value)).scalar_one())

    def _get_effect(self, conn: Connection, provider: str, effect_id: str) -> dict[str, Any] | None:
        data = conn.execute(
            sa.select(effects_t.c.data).where(
                effects_t.c.thread == self.thread,
                effects_t.c.provider == provider,
                effects_t.c.effect_id == effect_id,
            )
        ).scalar()
        return json.loads(data) if data is not None else None

    def _settings(self, conn: Connection, provider: str) -> dict[str, Any]:
        data = conn.execute(
            sa.select(settings_t.c.data).where(
                settings_t.c.thread == self.thread, settings_t.c.provider == provider
            )
        ).scalar()
        return json.loads(data) if data else {}

    # -- read API -----------------------------------------------------------------------------
    def calls(self, provider: str | None = None, op: str | None = None) -> list[Call]:
        """This thread's calls in sequence order, optionally only one provider / op."""
        with self._read() as conn:
            return self._calls(conn, provider, op)

    def _calls(self, conn: Connection, provider: str | None, op: str | None) -> list[Call]:
        q = sa.select(calls_t).where(calls_t.c.thread == self.thread)
        if provider is not None:
            q = q.where(calls_t.c.provider == provider)
        if op is not None:
            q = q.where(calls_t.c.op == op)
        return [
            Call(
                seq=r.seq,
                provider=r.provider,
                op=r.op,
                key=r.key,
                payload=json.loads(r.payload),
                outcome=r.outcome,
                effect_id=r.effect_id,
                attempt=r.attempt,
                pid=r.pid,
                time=r.time,
            )
            for r in conn.execute(q.order_by(calls_t.c.seq))
        ]

    def snapshot(self) -> LedgerSnapshot:
        """Calls in order, final kv state and keys still in flight, read in one consistent view."""
        with self._read() as conn:
            calls = self._calls(conn, None, None)
            state = {
                r.key: json.loads(r.value)
                for r in conn.execute(
                    sa.select(kv_t.c.key, kv_t.c.value)
                    .where(kv_t.c.thread == self.thread)
                    .order_by(kv_t.c.key)
                )
            }
            in_flight = tuple(
                InFlight(provider=r.provider, op=r.op, key=r.key, attempt=r.attempt, since=r.since)
                for r in conn.execute(
                    sa.select(keys_t)
                    .where(keys_t.c.thread == self.thread, keys_t.c.status == IN_FLIGHT)
                    .order_by(keys_t.c.since)
                )
            )
        return LedgerSnapshot(calls=tuple(calls), state=state, in_flight=in_flight)

    def kv_get(self, key: str, default: Any = None) -> Any:
        with self._read() as conn:
            value = conn.execute(
                sa.select(kv_t.c.value).where(kv_t.c.thread == self.thread, kv_t.c.key == key)
            ).scalar()
        return json.loads(value) if value is not None else default

    def counter_value(self, name: str) -> int:
        with self._read() as conn:
            value = conn.execute(
                sa.select(counters_t.c.value).where(
                    counters_t.c.thread == self.thread, counters_t.c.name == "value:" + name
                )
            ).scalar()
        return int(value or 0)

    def effect(self, provider: str, effect_id: str) -> dict[str, Any] | None:
        """The provider's current record of one effect (a charge, a message, a reservation)."""
        with self._read() as conn:
            return self._get_effect(conn, provider, effect_id)

    def effects(self, provider: str, ref: str | None = None) -> list[dict[str, Any]]:
        """A provider's effects by id (creation order per prefix), optionally those with a client ``ref``."""
        with self._read() as conn:
            q = sa.select(effects_t.c.data).where(
                effects_t.c.thread == self.thread, effects_t.c.provider == provider
            )
            if ref is not None:
                q = q.where(effects_t.c.ref == ref)
            return [json.loads(d) for d in conn.execute(q.order_by(effects_t.c.effect_id)).scalars()]

    def key(self, provider: str, key: str) -> KeyState | None:
        """What the provider remembers of an idempotency key (expired keys included)."""
        with self._read() as conn:
            row = conn.execute(
                sa.select(keys_t).where(
                    keys_t.c.thread == self.thread, keys_t.c.provider == provider, keys_t.c.key == key
                )
            ).first()
        if row is None:
            return None
        return KeyState.from_row(provider, key, row)

    def settings(self, provider: str) -> dict[str, Any]:
        """A provider's persisted fault settings (and the fault budgets still unused)."""
        with self._read() as conn:
            return self._settings(conn, provider)

    def configure(self, provider: str, **settings: Any) -> dict[str, Any]:
        """Merge fault settings for ``provider`` into the ledger, so they survive restarts."""
        with self.engine.begin() as conn:
            tx = Tx(self, conn)  # the thread's lock: a concurrent call sees old or new, never half
            data = tx.settings(provider)
            data.update(settings)
            tx.set_settings(provider, data)
        return data
