"""The durable ledger: every call a fake provider received, and the fakes' own state.

One schema on SQLite (default: a file in the case's workdir, through the standard library's
``sqlite3``) or any other URL (PostgreSQL, through SQLAlchemy; see killdrill.ledger._db).
Every row carries the case's ``thread``, so one shared database holds many cases and a case
never sees another's rows.

Concurrency: every write transaction starts by bumping the thread's sequence counter with an
``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``.  That row lock (PostgreSQL) or the
``BEGIN IMMEDIATE`` write lock (SQLite) serializes all writes of one thread, so the
check-then-write of an idempotency key has no window, whichever process runs it.  Keys also
have a primary key on (thread, provider, key) as a second line of defence.

Durability: SQLite runs in WAL mode with ``synchronous=NORMAL``: a committed transaction
survives a SIGKILL of the process (the fault killdrill injects), though not a power cut.

Layer: beside integrations and effects; may import ``records``, ``canonical`` and ``errors``.
"""

from __future__ import annotations

from killdrill.canonical import canonical_json  # the one canonical form (stored, compared)
from killdrill.canonical import canonical_value as canonical
from killdrill.ledger._ledger import Ledger
from killdrill.ledger._schema import (
    IN_FLIGHT,
    LEDGER_FORMAT,
    KeyState,
    LedgerError,
    ledger_path,
)
from killdrill.ledger._tx import Tx

__all__ = [
    "IN_FLIGHT",
    "LEDGER_FORMAT",
    "KeyState",
    "Ledger",
    "LedgerError",
    "Tx",
    "canonical",
    "canonical_json",
    "ledger_path",
]
