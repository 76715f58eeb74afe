"""The write transaction: the primitives the fakes build each call out of, under the thread's lock."""

from __future__ import annotations

import time
from typing import Any

from killdrill.canonical import canonical_json
from killdrill.canonical import canonical_value as canonical
from killdrill.ledger import _statements as statements
from killdrill.ledger._db import SqlConnection
from killdrill.ledger._schema import DONE, IN_FLIGHT, KeyState, insert_sql
from killdrill.records import Call


class Tx:
    """One write transaction of one thread, holding the thread's write lock.

    The fakes build each call out of these primitives; nothing here commits by itself.
    """

    def __init__(self, conn: SqlConnection, thread: str) -> None:
        self.conn = conn
        self.thread = thread
        self._bump("seq", 0)  # the thread's lock, taken first in every write transaction
        self.seq = 0
        self.context: dict[str, Any] | None = None  # the runtime context recorded with each call

    def _insert(self, table: str, **values: Any) -> None:
        """One row of this thread into ``table``."""
        values = {"thread": self.thread, **values}
        self.conn.execute(insert_sql(table, tuple(values)), values)

    def _bump(self, name: str, by: int = 1) -> int:
        return statements.bump_counter(self.conn, self.thread, name, by)

    def next_id(self, prefix: str) -> str:
        """A deterministic effect id: per thread, ``ch_0001``, ``ch_0002``..."""
        return f"{prefix}_{self._bump('id:' + prefix):04d}"

    def counter(self, name: str, by: int) -> int:
        """Add ``by`` to a named counter of this thread and return its new value."""
        return self._bump("value:" + name, by)

    def record(
        self,
        provider: str,
        op: str,
        key: str | None,
        payload: dict[str, Any],
        outcome: str,
        effect_id: str | None,
        attempt: int,
        pid: int,
    ) -> Call:
        """Record the call this transaction answered; it gets the thread's next sequence number."""
        self.seq = self._bump("seq")
        fields: dict[str, Any] = {
            "seq": self.seq,
            "provider": provider,
            "op": op,
            "key": key,
            "outcome": outcome,
            "effect_id": effect_id,
            "attempt": attempt,
            "pid": pid,
            "time": time.time(),
        }
        context = self.context or None
        self._insert(
            "killdrill_calls",
            payload=canonical_json(payload),
            context=canonical_json(context) if context else None,
            **fields,
        )
        return Call(payload=canonical(payload), context=canonical(context) if context else None, **fields)

    # -- idempotency keys -------------------------------------------------------------------
    def key_state(
        self, provider: str, key: str, ttl: float | None, now: float | None = None
    ) -> KeyState | None:
        """The key's state, or None if unseen or expired (an expired key is forgotten here).

        ``now`` is the harness clock (real time unless a test advanced it)."""
        row = statements.key_row(self.conn, self.thread, provider, key)
        if row is None:
            return None
        now = time.time() if now is None else now
        if ttl is not None and row["status"] == DONE and row["since"] + ttl < now:
            self.conn.execute(
                "DELETE FROM killdrill_keys WHERE thread = :thread AND provider = :provider AND key = :key",
                {"thread": self.thread, "provider": provider, "key": key},
            )
            return None
        return KeyState.from_row(provider, key, row)

    def claim_key(self, provider: str, key: str, op: str, payload: dict[str, Any], attempt: int) -> None:
        """Mark ``key`` in flight: its first request is being executed."""
        self._insert(
            "killdrill_keys",
            provider=provider,
            key=key,
            op=op,
            payload=canonical_json(payload),
            status=IN_FLIGHT,
            response=None,
            effect_id=None,
            attempt=attempt,
            since=time.time(),
        )

    def complete_key(self, provider: str, key: str, response: dict[str, Any], effect_id: str | None) -> None:
        """Store the first response under ``key``: later requests with it replay this."""
        self.conn.execute(
            "UPDATE killdrill_keys SET status = :status, response = :response, effect_id = :effect_id,"
            " since = :since WHERE thread = :thread AND provider = :provider AND key = :key",
            {
                "status": DONE,
                "response": canonical_json(response),
                "effect_id": effect_id,
                "since": time.time(),
                "thread": self.thread,
                "provider": provider,
                "key": key,
            },
        )

    def release_key(self, provider: str, key: str) -> None:
        """Forget an in-flight key whose request provably did nothing (a retryable refusal)."""
        self.conn.execute(
            "DELETE FROM killdrill_keys"
            " WHERE thread = :thread AND provider = :provider AND key = :key AND status = :status",
            {"thread": self.thread, "provider": provider, "key": key, "status": IN_FLIGHT},
        )

    # -- effects ----------------------------------------------------------------------------
    def put_effect(self, provider: str, effect_id: str, data: dict[str, Any], ref: str | None = None) -> None:
        self._insert(
            "killdrill_effects", provider=provider, effect_id=effect_id, ref=ref, data=canonical_json(data)
        )

    def update_effect(self, provider: str, effect_id: str, data: dict[str, Any]) -> None:
        self.conn.execute(
            "UPDATE killdrill_effects SET data = :data"
            " WHERE thread = :thread AND provider = :provider AND effect_id = :effect_id",
            {
                "data": canonical_json(data),
                "thread": self.thread,
                "provider": provider,
                "effect_id": effect_id,
            },
        )

    def get_effect(self, provider: str, effect_id: str) -> dict[str, Any] | None:
        return statements.effect(self.conn, self.thread, provider, effect_id)

    # -- kv and settings ----------------------------------------------------------------------
    def kv_set(self, key: str, value: Any) -> None:
        statements.upsert(
            self.conn, "killdrill_kv", {"thread": self.thread, "key": key}, {"value": canonical_json(value)}
        )

    def settings(self, provider: str) -> dict[str, Any]:
        return statements.settings(self.conn, self.thread, provider)

    def set_settings(self, provider: str, data: dict[str, Any]) -> None:
        statements.upsert(
            self.conn,
            "killdrill_settings",
            {"thread": self.thread, "provider": provider},
            {"data": canonical_json(data)},
        )
