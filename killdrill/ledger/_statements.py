"""The statements a thread's reads and its write transaction share: one thread's rows of one table.

Below both :mod:`._ledger` (the reads, the connection) and :mod:`._tx` (the write transaction), so
neither imports the other for them.
"""

from __future__ import annotations

import json
from typing import Any

from killdrill.ledger._db import SqlConnection
from killdrill.ledger._schema import insert_sql

__all__ = ["bump_counter", "effect", "key_row", "settings", "upsert"]


def upsert(conn: SqlConnection, table: str, pk: dict[str, Any], values: dict[str, Any]) -> None:
    """INSERT ... ON CONFLICT (pk) DO UPDATE: the same text on SQLite and PostgreSQL."""
    conn.execute(insert_sql(table, (*pk, *values), tuple(pk)), {**pk, **values})


def bump_counter(conn: SqlConnection, thread: str, name: str, by: int) -> int:
    """Add ``by`` to the thread's counter ``name``; its new value."""
    rows = conn.execute(
        "INSERT INTO killdrill_counters (thread, name, value) VALUES (:thread, :name, :by)"
        " ON CONFLICT (thread, name) DO UPDATE SET value = killdrill_counters.value + :by"
        " RETURNING value",
        {"thread": thread, "name": name, "by": by},
    )
    return int(rows[0]["value"])


def effect(conn: SqlConnection, thread: str, provider: str, effect_id: str) -> dict[str, Any] | None:
    """The stored state of one effect of the thread, or None."""
    rows = conn.execute(
        "SELECT data FROM killdrill_effects"
        " WHERE thread = :thread AND provider = :provider AND effect_id = :effect_id",
        {"thread": thread, "provider": provider, "effect_id": effect_id},
    )
    return json.loads(rows[0]["data"]) if rows else None


def settings(conn: SqlConnection, thread: str, provider: str) -> dict[str, Any]:
    """A provider's persisted fault settings for the thread (empty when none)."""
    rows = conn.execute(
        "SELECT data FROM killdrill_settings WHERE thread = :thread AND provider = :provider",
        {"thread": thread, "provider": provider},
    )
    return json.loads(rows[0]["data"]) if rows and rows[0]["data"] else {}


def key_row(conn: SqlConnection, thread: str, provider: str, key: str) -> Any:
    """The row of an idempotency key of the thread, or None."""
    rows = conn.execute(
        "SELECT op, payload, status, response, effect_id, attempt, since FROM killdrill_keys"
        " WHERE thread = :thread AND provider = :provider AND key = :key",
        {"thread": thread, "provider": provider, "key": key},
    )
    return rows[0] if rows else None
