"""What the ledger stores and where: the SQLAlchemy Core schema, its format tag, the key states,
the canonical payload form, and the URL/engine set-up (SQLite pragmas, the write lock up front)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from killdrill.errors import HarnessError
from killdrill.matching import canonical as canonical_json  # the one canonical form (stored, compared)

LEDGER_FORMAT = "killdrill-ledger/1"
IN_FLIGHT = "in_flight"
DONE = "done"

metadata = sa.MetaData()
meta_t = sa.Table(
    "killdrill_meta",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
counters_t = sa.Table(
    "killdrill_counters",
    metadata,
    sa.Column("thread", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)
calls_t = sa.Table(
    "killdrill_calls",
    metadata,
    sa.Column("thread", sa.String(200), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("provider", sa.String(64), nullable=False),
    sa.Column("op", sa.String(64), nullable=False),
    sa.Column("key", sa.Text),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("effect_id", sa.String(200)),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("time", sa.Float, nullable=False),
)
keys_t = sa.Table(
    "killdrill_keys",
    metadata,
    sa.Column("thread", sa.String(200), primary_key=True),
    sa.Column("provider", sa.String(64), primary_key=True),
    sa.Column("key", sa.String(500), primary_key=True),
    sa.Column("op", sa.String(64), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("response", sa.Text),
    sa.Column("effect_id", sa.String(200)),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("since", sa.Float, nullable=False),
)
effects_t = sa.Table(
    "killdrill_effects",
    metadata,
    sa.Column("thread", sa.String(200), primary_key=True),
    sa.Column("provider", sa.String(64), primary_key=True),
    sa.Column("effect_id", sa.String(200), primary_key=True),
    sa.Column("ref", sa.Text),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("killdrill_effects_ref", "thread", "provider", "ref"),
)
kv_t = sa.Table(
    "killdrill_kv",
    metadata,
    sa.Column("thread", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(500), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
settings_t = sa.Table(
    "killdrill_settings",
    metadata,
    sa.Column("thread", sa.String(200), primary_key=True),
    sa.Column("provider", sa.String(64), primary_key=True),
    sa.Column("data", sa.Text, nullable=False),
)


class LedgerError(HarnessError, RuntimeError):
    """The ledger cannot be opened or read: a one-line message that names the file."""


def canonical(value: Any) -> Any:
    """The JSON value a payload is stored and compared as (tuples become lists, keys sorted)."""
    return json.loads(canonical_json(value))


def ledger_path(workdir: str | os.PathLike[str]) -> str:
    """Where a case's ledger lives inside its workdir (the supervisor exports it as KILLDRILL_LEDGER)."""
    return os.path.join(os.fspath(workdir), ".killdrill", "ledger.sqlite")


@dataclass(frozen=True)
class KeyState:
    """An idempotency key the provider has seen: its first request and, once done, the response."""

    provider: str
    key: str
    op: str
    payload: str  # canonical JSON of the first request
    status: str  # IN_FLIGHT or "done"
    response: dict[str, Any] | None
    effect_id: str | None
    attempt: int
    since: float

    @classmethod
    def from_row(cls, provider: str, key: str, row: Any) -> KeyState:
        """The state of ``key`` from its ``killdrill_keys`` row (the reader and the writer both)."""
        return cls(
            provider=provider,
            key=key,
            op=row.op,
            payload=row.payload,
            status=row.status,
            response=json.loads(row.response) if row.response else None,
            effect_id=row.effect_id,
            attempt=row.attempt,
            since=row.since,
        )


def _to_url(url: str | os.PathLike[str]) -> tuple[str, str | None]:
    """(SQLAlchemy URL, SQLite file path or None).  A plain path becomes a SQLite file."""
    text = os.fspath(url)
    if "://" not in text:
        path = os.path.abspath(text)
        return f"sqlite:///{path}", path
    parsed = sa.engine.make_url(text)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        return text, os.path.abspath(parsed.database)
    return text, None


def _make_engine(url: str) -> Engine:
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=False)
    engine = sa.create_engine(url, connect_args={"timeout": 30.0, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # The pysqlite recipe: let us emit BEGIN ourselves, so a write takes the lock up front.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("kd_read") else "BEGIN IMMEDIATE")

    return engine
