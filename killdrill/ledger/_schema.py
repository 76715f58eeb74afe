"""What the ledger stores and where: the tables, their format tag, the key states, the canonical
payload form, and which URL is a SQLite file."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any

from killdrill.errors import HarnessError

LEDGER_FORMAT = "killdrill-ledger/1"
IN_FLIGHT = "in_flight"
DONE = "done"

TABLES = {
    "killdrill_meta": "name VARCHAR(64) NOT NULL, value TEXT NOT NULL, PRIMARY KEY (name)",
    "killdrill_counters": (
        "thread VARCHAR(200) NOT NULL, name VARCHAR(200) NOT NULL, value BIGINT NOT NULL, "
        "PRIMARY KEY (thread, name)"
    ),
    "killdrill_calls": (
        "thread VARCHAR(200) NOT NULL, seq INTEGER NOT NULL, provider VARCHAR(64) NOT NULL, "
        "op VARCHAR(64) NOT NULL, key TEXT, payload TEXT NOT NULL, outcome VARCHAR(16) NOT NULL, "
        "effect_id VARCHAR(200), attempt INTEGER NOT NULL, pid INTEGER NOT NULL, time FLOAT NOT NULL, "
        "context TEXT, PRIMARY KEY (thread, seq)"
    ),
    "killdrill_keys": (
        "thread VARCHAR(200) NOT NULL, provider VARCHAR(64) NOT NULL, key VARCHAR(500) NOT NULL, "
        "op VARCHAR(64) NOT NULL, payload TEXT NOT NULL, status VARCHAR(16) NOT NULL, response TEXT, "
        "effect_id VARCHAR(200), attempt INTEGER NOT NULL, since FLOAT NOT NULL, "
        "PRIMARY KEY (thread, provider, key)"
    ),
    "killdrill_effects": (
        "thread VARCHAR(200) NOT NULL, provider VARCHAR(64) NOT NULL, effect_id VARCHAR(200) NOT NULL, "
        "ref TEXT, data TEXT NOT NULL, PRIMARY KEY (thread, provider, effect_id)"
    ),
    "killdrill_kv": (
        "thread VARCHAR(200) NOT NULL, key VARCHAR(500) NOT NULL, value TEXT NOT NULL, "
        "PRIMARY KEY (thread, key)"
    ),
    "killdrill_settings": (
        "thread VARCHAR(200) NOT NULL, provider VARCHAR(64) NOT NULL, data TEXT NOT NULL, "
        "PRIMARY KEY (thread, provider)"
    ),
}
"""Every table and its columns, in the portable SQL both SQLite and PostgreSQL take (the same
definitions SQLAlchemy's ``create_all`` made for ledgers written by earlier versions)."""

ADDED_COLUMNS = {("killdrill_calls", "context"): "TEXT"}
"""Columns added after ledgers of this format were first written: added to such a ledger when it
is opened (``context``: the runtime context of a call, ``killdrill.agent.in_runtime``)."""

SCHEMA = [
    *(f"CREATE TABLE IF NOT EXISTS {name} ({columns})" for name, columns in TABLES.items()),
    "CREATE INDEX IF NOT EXISTS killdrill_effects_ref ON killdrill_effects (thread, provider, ref)",
]


@functools.lru_cache(maxsize=64)
def insert_sql(table: str, columns: tuple[str, ...], conflict: tuple[str, ...] = ()) -> str:
    """``INSERT`` of ``columns`` (``:name`` parameters); with ``conflict``, an upsert that sets
    every other column: the same text on SQLite and PostgreSQL, built once per shape."""
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"
    if conflict:
        update = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in conflict)
        sql += f" ON CONFLICT ({', '.join(conflict)}) DO UPDATE SET {update}"
    return sql


class LedgerError(HarnessError, RuntimeError):
    """The ledger cannot be opened or read: a one-line message that names the file."""


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
            op=row["op"],
            payload=row["payload"],
            status=row["status"],
            response=json.loads(row["response"]) if row["response"] else None,
            effect_id=row["effect_id"],
            attempt=row["attempt"],
            since=row["since"],
        )


def _to_url(url: str | os.PathLike[str]) -> tuple[str, str | None]:
    """(URL, SQLite file path or None).  A plain path, or ``sqlite:///PATH``, is a SQLite file.

    A SQLite URL's query options are not used (the ledger sets its own); one without a file
    (in memory: every connection its own database) cannot hold a ledger.
    """
    text = os.fspath(url)
    if "://" not in text:
        path = os.path.abspath(text)
        return f"sqlite:///{path}", path
    scheme = text.split("://", 1)[0]
    if scheme == "sqlite" or scheme.startswith("sqlite+"):
        database = text.split("://", 1)[1].removeprefix("/").split("?", 1)[0]
        if not database or database == ":memory:":
            raise LedgerError(f"killdrill: ledger {text} is unusable: a ledger must be a file, not in memory")
        return text, os.path.abspath(database)
    return text, None
