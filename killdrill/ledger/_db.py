"""Two drivers behind one small interface: the standard library's ``sqlite3`` for a SQLite file,
SQLAlchemy for any other URL (PostgreSQL).

Why two: every agent process opens its ledger when it starts, and the harness opens each case's
file after every attempt.  Importing SQLAlchemy cost an agent ~220 ms of its start, and each new
engine compiled every statement again (~5 ms per case file read); measured with
``python -X importtime`` and ``tests/benchmarks``.  The SQL is written once, as text with
``:name`` parameters, which both drivers take; the two dialects share the upsert and
``RETURNING`` syntax the ledger needs (SQLite >= 3.35, PostgreSQL >= 9.5).
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

Row = Mapping[str, Any]

_PRAGMAS: tuple[str, ...] = (
    "PRAGMA busy_timeout=30000",
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
)


class SqlConnection(Protocol):
    """One transaction's connection: run one statement, get its rows (name -> value)."""

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]: ...

    def values(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Sequence[Any]]:
        """The rows as values in the SELECT's order (no name lookups: 10^5-row reads)."""
        ...


class Database(Protocol):
    """One open database with its pooled connections; ``read()``/``write()`` give one transaction."""

    dialect: str
    errors: tuple[type[BaseException], ...]  # what its driver raises when the database fails

    def read(self) -> contextlib.AbstractContextManager[SqlConnection]: ...

    def write(self) -> contextlib.AbstractContextManager[SqlConnection]: ...

    def dispose(self) -> None: ...

    def forget_after_fork(self) -> None: ...


# ---- SQLite: the standard library ---------------------------------------------------------------

_inherited: list[sqlite3.Connection] = []
"""Connections a forked child inherited: kept, never used or closed (closing one in the child
could checkpoint or unlink the parent's WAL files)."""


class _SQLiteConnection:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        return self._conn.execute(sql, params or {}).fetchall()

    def values(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Sequence[Any]]:
        return self._conn.execute(sql, params or {}).fetchall()  # sqlite3.Row is a sequence too


class SQLiteDatabase:
    """A SQLite file in WAL mode; reads ``BEGIN`` (a snapshot), writes ``BEGIN IMMEDIATE`` (the
    file's write lock up front, so a check-then-write has no window); busy waits up to 30 s."""

    dialect = "sqlite"
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(self, path: str, read_only: bool = False, durable: bool = True) -> None:
        self.path = path
        self.read_only = read_only
        self.durable = durable
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _checkout(self) -> sqlite3.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        where, pragmas = self.path, _PRAGMAS
        if self.read_only:  # no writes, so no checkpoint on close; the file keeps its WAL mode
            where, pragmas = Path(self.path).absolute().as_uri() + "?mode=ro", _PRAGMAS[:1]
        elif not self.durable:  # commits and the close's checkpoint without an fsync
            pragmas = (*_PRAGMAS[:2], "PRAGMA synchronous=OFF")
        conn = sqlite3.connect(
            where, timeout=30.0, isolation_level=None, check_same_thread=False, uri=self.read_only
        )
        try:
            conn.row_factory = sqlite3.Row
            for pragma in pragmas:
                conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[SqlConnection]:
        conn = self._checkout()
        try:
            conn.execute(begin)
            yield _SQLiteConnection(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    conn.close()
                    raise
            raise
        finally:
            if not conn.in_transaction:
                with self._lock:
                    self._idle.append(conn)

    def read(self) -> contextlib.AbstractContextManager[SqlConnection]:
        return self._transaction("BEGIN")

    def write(self) -> contextlib.AbstractContextManager[SqlConnection]:
        return self._transaction("BEGIN IMMEDIATE")

    def dispose(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def forget_after_fork(self) -> None:
        _inherited.extend(self._idle)
        self._idle = []
        self._lock = threading.Lock()


# ---- any other URL: SQLAlchemy, imported only here ----------------------------------------------


class _SQLAlchemyConnection:
    def __init__(self, conn: Any, texts: dict[str, Any]) -> None:
        self._conn = conn
        self._texts = texts

    def _run(self, sql: str, params: Mapping[str, Any] | None) -> Any:
        stmt = self._texts.get(sql)
        if stmt is None:
            import sqlalchemy as sa

            stmt = self._texts.setdefault(sql, sa.text(sql))
        return self._conn.execute(stmt, dict(params or {}))

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Row]:
        result = self._run(sql, params)
        return result.mappings().all() if result.returns_rows else []

    def values(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Sequence[Any]]:
        return self._run(sql, params).all()  # type: ignore[no-any-return]


class SQLAlchemyDatabase:
    """Any SQLAlchemy URL (PostgreSQL with psycopg is the one tested); one engine, pooled."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.engine = sa.create_engine(url, pool_pre_ping=False)
        self.dialect: str = self.engine.dialect.name
        self.errors: tuple[type[BaseException], ...] = (sa.exc.SQLAlchemyError,)
        self._texts: dict[str, Any] = {}

    @contextlib.contextmanager
    def read(self) -> Iterator[SqlConnection]:
        with self.engine.connect() as conn, conn.begin():
            yield _SQLAlchemyConnection(conn, self._texts)

    @contextlib.contextmanager
    def write(self) -> Iterator[SqlConnection]:
        with self.engine.begin() as conn:
            yield _SQLAlchemyConnection(conn, self._texts)

    def dispose(self) -> None:
        self.engine.dispose()

    def forget_after_fork(self) -> None:
        self.engine.dispose(close=False)  # pooled connections must never be shared with a child


def open_database(url: str, path: str | None, read_only: bool = False, durable: bool = True) -> Database:
    """The driver for a ledger: ``path`` (a SQLite file) or any other SQLAlchemy ``url``."""
    if path is not None:
        return SQLiteDatabase(path, read_only, durable)
    return SQLAlchemyDatabase(url)


def unusable(exc: BaseException) -> bool:
    """Is ``exc`` a URL or driver SQLAlchemy cannot use (bad URL, missing driver module)?"""
    if isinstance(exc, ImportError):
        return True
    sa_exc = sys.modules.get("sqlalchemy.exc")  # loaded if SQLAlchemy was tried at all
    return sa_exc is not None and isinstance(exc, (sa_exc.ArgumentError, sa_exc.NoSuchModuleError))
