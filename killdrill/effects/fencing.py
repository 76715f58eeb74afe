"""A fenced claim: a lease that expires, and a fencing token that outlives it.

A lease alone does not stop a zombie: a worker that stalled past its lease (a GC pause, a
partition, SIGSTOP in a drill) wakes up still believing it owns the work, and sends.  The
fencing token fixes that, *if the resource that takes the write checks it*:

- every acquisition of a key's lease gets a token; taking over an expired lease bumps it, so
  tokens only grow and the latest holder has the highest;
- the holder passes its token with every write (``fakes.counter.increment(..., fence=token)``,
  a DynamoDB condition, an etcd compare, a Kafka producer epoch); the resource remembers the
  highest token it accepted and refuses a lower one: the zombie's late write is refused there;
- ``complete`` stores the result only for the current token (this store fences itself).

Where the token is checked matters: checked only here, before the call, it leaves the window
between check and send, exactly where a pause lands.  The check must be at the provider;
a provider that cannot check it (Stripe, email) needs an idempotency key or a lookup instead.

The store needs no liveness of the owner (it works across hosts): a live lease is waited for,
an expired one is taken over.  ``lease_s`` must exceed the longest legitimate hold, or
:meth:`FencedStore.renew` must be called while working.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from killdrill.effects.engine import make_engine, sqlalchemy_url
from killdrill.effects.errors import EffectError
from killdrill.effects.keys import canonical_json

__all__ = ["LEASES_TABLE", "FencedStore", "Lease", "LeaseHeld", "LeaseLost", "fenced_effect"]

T = TypeVar("T")
LEASES_TABLE = "killdrill_leases"
_HELD, _DONE = "held", "done"


class LeaseHeld(EffectError):
    """Another worker holds a live lease on the key and did not finish within ``wait_s``."""


class LeaseLost(EffectError):
    """A newer token exists for the key: this worker's lease expired and was taken over."""


@dataclass(frozen=True)
class Lease:
    """What :meth:`FencedStore.acquire` got: a token to write with, or the finished result."""

    key: str
    token: int
    owner: str
    expires_at: float
    done: bool = False
    result: Any = None
    taken_over: bool = False  # an expired lease of another worker was taken over (token bumped)


class FencedStore:
    """Leases with fencing tokens, in SQLite or PostgreSQL (a SQLAlchemy URL or a file path)."""

    def __init__(self, url: str | os.PathLike[str], *, lease_s: float = 30.0, create: bool = True) -> None:
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        self.url = sqlalchemy_url(url)
        self.lease_s = lease_s
        self.engine = make_engine(self.url)
        self.owner = f"{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.metadata = sa.MetaData()
        self.leases = sa.Table(
            LEASES_TABLE,
            self.metadata,
            sa.Column("key", sa.String, primary_key=True),
            sa.Column("token", sa.Integer, nullable=False),
            sa.Column("owner", sa.String, nullable=False),
            sa.Column("expires_at", sa.Float, nullable=False),
            sa.Column("status", sa.String, nullable=False),
            sa.Column("result", sa.Text),
        )
        if create:
            self.metadata.create_all(self.engine)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:  # BEGIN IMMEDIATE on SQLite: one writer decides
            yield conn

    def _row(self, conn: Connection, key: str) -> Any:
        q = sa.select(self.leases).where(self.leases.c.key == key)
        if self.engine.dialect.name == "postgresql":
            q = q.with_for_update()
        return conn.execute(q).mappings().first()

    def close(self) -> None:
        self.engine.dispose()

    def try_acquire(self, key: str) -> Lease | None:
        """The lease (fresh: token 1; an expired one taken over: token + 1), the finished result,
        or None while another worker's lease is live."""
        now = time.time()
        expires = now + self.lease_s
        insert = (postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert)(
            self.leases
        )
        with self._tx() as conn:
            inserted = conn.execute(
                insert.values(key=key, token=1, owner=self.owner, expires_at=expires, status=_HELD)
                .on_conflict_do_nothing(index_elements=["key"])
                .returning(self.leases.c.key)
            ).first()  # fmt: skip
            if inserted is not None:
                return Lease(key, 1, self.owner, expires)
            row = self._row(conn, key)
            if row["status"] == _DONE:
                result = None if row["result"] is None else json.loads(row["result"])
                return Lease(key, row["token"], row["owner"], row["expires_at"], done=True, result=result)
            if row["owner"] == self.owner or row["expires_at"] <= now:
                token = row["token"] + 1
                conn.execute(
                    self.leases.update()
                    .where(self.leases.c.key == key)
                    .values(token=token, owner=self.owner, expires_at=expires)
                )
                return Lease(key, token, self.owner, expires, taken_over=row["owner"] != self.owner)
            return None

    def acquire(self, key: str, *, wait_s: float = 60.0, poll_s: float = 0.05) -> Lease:
        """:meth:`try_acquire`, waiting up to ``wait_s`` for a live lease to end or expire."""
        deadline = time.monotonic() + wait_s
        while True:
            lease = self.try_acquire(key)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise LeaseHeld(f"{key!r}: another worker holds a live lease (waited {wait_s:g}s)")
            time.sleep(poll_s)

    def renew(self, lease: Lease) -> Lease:
        """Extend a lease still ours; :class:`LeaseLost` if a newer token took it."""
        now = time.time()
        with self._tx() as conn:
            done = conn.execute(
                self.leases.update()
                .where(self.leases.c.key == lease.key, self.leases.c.token == lease.token)
                .where(self.leases.c.status == _HELD)
                .values(expires_at=now + self.lease_s)
                .returning(self.leases.c.key)
            ).first()
        if done is None:
            raise LeaseLost(f"{lease.key!r}: token {lease.token} was superseded")
        return Lease(lease.key, lease.token, lease.owner, now + self.lease_s)

    def complete(self, lease: Lease, result: Any) -> None:
        """Store the result under the lease's token; :class:`LeaseLost` if it is not the current one."""
        with self._tx() as conn:
            done = conn.execute(
                self.leases.update()
                .where(self.leases.c.key == lease.key, self.leases.c.token == lease.token)
                .where(self.leases.c.status == _HELD)
                .values(status=_DONE, result=canonical_json(result))
                .returning(self.leases.c.key)
            ).first()
        if done is None:
            raise LeaseLost(
                f"{lease.key!r}: token {lease.token} was superseded before its result was stored;"
                " if the write was accepted, the provider did not check the fencing token"
            )

    def current_token(self, key: str) -> int | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(self.leases.c.token).where(self.leases.c.key == key)).first()
        return None if row is None else int(row[0])


def fenced_effect(
    store: FencedStore,
    key: str,
    perform: Callable[[int], T],
    *,
    present: Callable[[int], int] | None = None,
    wait_s: float = 60.0,
    poll_s: float = 0.05,
) -> T | Any:
    """Perform ``key``'s effect under a fenced lease; ``perform(token)`` must send the token.

    ``present(token)`` shows the token to the provider before anything is sent (e.g.
    ``lambda t: fakes.counter.fence(name, t)``: from then on an older holder is refused) and
    answers the highest token that already wrote: non-zero means an earlier holder's write
    landed and it died before storing the result, which is then adopted, not redone.  Without
    ``present`` a holder that died after its write makes the next one write again: only a
    provider-side idempotency key can save that.

    Done before (by anyone): the stored result.  Our write refused (a newer token exists: we
    are the zombie) or our result refused by the store: wait for the new holder's result and
    return it.  Any other failure is re-raised with the lease left to expire.
    """
    from killdrill.agent import boundary

    while True:
        lease = store.acquire(key, wait_s=wait_s, poll_s=poll_s)
        if lease.done:
            return lease.result
        try:
            wrote = present(lease.token) if present is not None else 0
            # The lease is ours (its token presented), the request not sent: where a stalled
            # worker's lease runs out.
            boundary("after:effects.lease")
            result: Any = {"reconciled": True, "token": wrote} if wrote else perform(lease.token)
        except Exception:
            if (store.current_token(key) or 0) <= lease.token:
                raise
            continue  # lost the lease: the newer holder's outcome is the effect's (acquire waits for it)
        try:
            store.complete(lease, result)
        except LeaseLost:
            continue  # a newer holder took over meanwhile: its stored result is the effect's
        return result
