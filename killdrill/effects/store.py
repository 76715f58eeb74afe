"""The claim-before-send result store (:class:`ResultStore`) and its planted defect
(:class:`RacyResultStore`, read then insert: never use it)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from killdrill.effects.engine import _tables, make_engine, sqlalchemy_url
from killdrill.effects.errors import EffectError, KeyReuseError
from killdrill.effects.keys import canonical_json, payload_hash
from killdrill.effects.ownership import _attempt_from_env, _owner_alive, _owner_token
from killdrill.effects.records import (
    EV_CLAIMED,
    EV_RECLAIMED,
    EV_RECONCILED,
    EV_RELEASED,
    EV_REPLAYED,
    EV_SUCCEEDED,
    IN_FLIGHT,
    RELEASED,
    SUCCEEDED,
    Claim,
    EffectEvent,
    EffectRecord,
)


class ResultStore:
    """Claims and results of effects, keyed by idempotency key, in SQLite or PostgreSQL.

    ``claim`` inserts the row *before* the effect, in one statement guarded by the primary
    key (``INSERT ... ON CONFLICT DO NOTHING``), inside a transaction that holds the row:
    ``BEGIN IMMEDIATE`` on SQLite, ``SELECT ... FOR UPDATE`` on PostgreSQL.  There is no
    moment where two callers have both looked and neither has written.

    ``url`` is a SQLAlchemy URL or a file path (SQLite; it may be the agent's checkpoint file).
    ``claim_strategy="read_then_insert"`` returns the planted defect, :class:`RacyResultStore`.
    """

    def __new__(
        cls, url: str | os.PathLike[str], *, claim_strategy: str = "atomic", **kw: Any
    ) -> ResultStore:
        if claim_strategy == "read_then_insert" and cls is ResultStore:
            return super().__new__(RacyResultStore)
        if claim_strategy not in ("atomic", "read_then_insert"):
            raise ValueError(f"unknown claim_strategy {claim_strategy!r}: 'atomic' or 'read_then_insert'")
        return super().__new__(cls)

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        claim_strategy: str = "atomic",
        stale_after_s: float | None = None,
        create: bool = True,
    ) -> None:
        """``stale_after_s``: a claim owned by a worker on *another host* (whose liveness
        cannot be checked) is treated as abandoned after this many seconds; None: never."""
        self.url = sqlalchemy_url(url)
        self.claim_strategy = claim_strategy
        self.stale_after_s = stale_after_s
        self.engine = make_engine(self.url)
        self.metadata = sa.MetaData()
        self.states, self.events = _tables(self.metadata)
        if create:
            self.metadata.create_all(self.engine)

    # -- plumbing -------------------------------------------------------------

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _insert(self) -> Any:
        ins = postgresql.insert if self.is_postgres else sqlite.insert
        return ins(self.states)

    def _row(self, conn: Connection, key: str, *, lock: bool) -> EffectRecord | None:
        q = sa.select(self.states).where(self.states.c.key == key)
        if lock and self.is_postgres:
            q = q.with_for_update()
        row = conn.execute(q).mappings().first()
        return _record(row) if row is not None else None

    def _log(self, conn: Connection, rec: EffectRecord, event: str, owner: str | None, now: float) -> None:
        conn.execute(
            self.events.insert().values(
                key=rec.key,
                event=event,
                thread=rec.thread,
                node=rec.node,
                occurrence=rec.occurrence,
                attempt=_attempt_from_env(),
                payload_hash=rec.payload_hash,
                owner=owner,
                at=now,
            )
        )

    def _alive(self, rec: EffectRecord, now: float) -> bool | None:
        alive = _owner_alive(rec.owner)
        if alive is None and self.stale_after_s is not None and now - rec.updated_at > self.stale_after_s:
            return False
        return alive

    # -- the protocol ---------------------------------------------------------

    def claim(
        self,
        key: str,
        *,
        thread: str | None = None,
        node: str | None = None,
        occurrence: int | None = None,
        payload: Any = None,
        payload_digest: str | None = None,
    ) -> Claim:
        """Record the intent to perform ``key``'s effect, before performing it.

        Returns ``claimed`` when this caller now owns the key (fresh, or a released claim),
        ``succeeded`` with the stored result (a replay, counted), or ``in_flight``.
        Raises :class:`KeyReuseError` if the key was claimed for another payload.
        """
        digest = payload_digest or (payload_hash(payload) if payload is not None else None)
        now = time.time()
        owner = _owner_token()
        values = _claim_row(key, thread, node, occurrence, digest, owner, now)
        with self._tx() as conn:
            # RETURNING, not rowcount: some drivers report -1 for ON CONFLICT DO NOTHING.
            inserted = conn.execute(
                self._insert()
                .values(**values)
                .on_conflict_do_nothing(index_elements=["key"])
                .returning(self.states.c.key)
            ).first()
            rec = self._row(conn, key, lock=True)
            assert rec is not None  # inserted now, or held by the conflict
            if inserted is not None:
                self._log(conn, rec, EV_CLAIMED, owner, now)
                return Claim("claimed", rec)
            return self._existing(conn, rec, digest, owner, now)

    def _existing(
        self, conn: Connection, rec: EffectRecord, digest: str | None, owner: str, now: float
    ) -> Claim:
        """Decide on a key that already has a row (called with the row held)."""
        if digest and rec.payload_hash and digest != rec.payload_hash:
            raise KeyReuseError(rec.key, rec.payload_hash, digest)
        if rec.status == SUCCEEDED:
            conn.execute(
                self.states.update()
                .where(self.states.c.key == rec.key)
                .values(replayed=True, replay_count=self.states.c.replay_count + 1)
            )
            self._log(conn, rec, EV_REPLAYED, owner, now)
            return Claim("succeeded", rec)
        if rec.status == RELEASED:
            rec = self._reclaim(conn, rec, owner, now)
            return Claim("claimed", rec)
        return Claim("in_flight", rec, owner_alive=self._alive(rec, now))

    def _reclaim(self, conn: Connection, rec: EffectRecord, owner: str, now: float) -> EffectRecord:
        conn.execute(
            self.states.update()
            .where(self.states.c.key == rec.key)
            .values(
                status=IN_FLIGHT,
                owner=owner,
                attempt=_attempt_from_env(),
                claims=self.states.c.claims + 1,
                updated_at=now,
            )
        )
        self._log(conn, rec, EV_RECLAIMED, owner, now)
        new = self._row(conn, rec.key, lock=False)
        assert new is not None
        return new

    def take_over(self, claim: Claim) -> Claim | None:
        """Take an in-flight claim whose owner is gone.  Compare-and-swap on the owner, so of
        several resumers exactly one gets it; the others get None and should look again."""
        if claim.state != "in_flight":
            raise ValueError("only an in-flight claim can be taken over")
        now = time.time()
        owner = _owner_token()
        with self._tx() as conn:
            rec = self._row(conn, claim.record.key, lock=True)
            if rec is None or rec.status != IN_FLIGHT or rec.owner != claim.record.owner:
                return None
            if self._alive(rec, now) is not False:
                return None
            new = self._reclaim(conn, rec, owner, now)
            return Claim("claimed", new, taken_over=True)

    def complete(self, key: str, result: Any, *, reconciled: bool = False) -> EffectRecord:
        """Store the result of a performed effect (or, ``reconciled``, of one found delivered)."""
        now = time.time()
        text = canonical_json(result)
        with self._tx() as conn:
            rec = self._row(conn, key, lock=True)
            if rec is None:
                raise EffectError(f"complete({key!r}): the key was never claimed")
            if rec.status == RELEASED:
                raise EffectError(f"complete({key!r}): the claim was released; claim it again first")
            conn.execute(
                self.states.update()
                .where(self.states.c.key == key)
                .values(status=SUCCEEDED, result=text, completed_at=now, updated_at=now)
            )
            self._log(conn, rec, EV_RECONCILED if reconciled else EV_SUCCEEDED, _owner_token(), now)
            new = self._row(conn, key, lock=False)
            assert new is not None
            return new

    def release(self, key: str) -> EffectRecord:
        """Give a claim back.  Only for a request that provably never left (see
        :class:`TransportNotSent`): releasing after an ambiguous error invites a duplicate."""
        now = time.time()
        with self._tx() as conn:
            rec = self._row(conn, key, lock=True)
            if rec is None:
                raise EffectError(f"release({key!r}): the key was never claimed")
            if rec.status != IN_FLIGHT:
                raise EffectError(f"release({key!r}): the key is {rec.status}, not in flight")
            conn.execute(
                self.states.update().where(self.states.c.key == key).values(status=RELEASED, updated_at=now)
            )
            self._log(conn, rec, EV_RELEASED, _owner_token(), now)
            new = self._row(conn, key, lock=False)
            assert new is not None
            return new

    # -- reading --------------------------------------------------------------

    def get(self, key: str) -> EffectRecord | None:
        with self.engine.connect() as conn:
            return self._row(conn, key, lock=False)

    def records(self, *, thread: str | None = None) -> list[EffectRecord]:
        q = sa.select(self.states).order_by(self.states.c.created_at, self.states.c.key)
        if thread is not None:
            q = q.where(self.states.c.thread == thread)
        with self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(q).mappings()]

    def log(self, *, key: str | None = None) -> list[EffectEvent]:
        q = sa.select(self.events).order_by(self.events.c.id)
        if key is not None:
            q = q.where(self.events.c.key == key)
        with self.engine.connect() as conn:
            return [EffectEvent(**dict(r)) for r in conn.execute(q).mappings()]


class RacyResultStore(ResultStore):
    """PLANTED DEFECT — do not use.  ``claim`` reads, then (in a second transaction) writes.

    Two resumers can both read "no row", both "insert" (an upsert, so neither fails) and
    both perform the effect.  It exists so the concurrency drill and the detection corpus
    have a real read-then-insert race to catch.  ``on_window`` runs between the read and the
    write; by default it announces the kill point ``after:effects.claim_read`` so a lockstep
    barrier drill holds every resumer inside the window.
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        claim_strategy: str = "read_then_insert",
        stale_after_s: float | None = None,
        create: bool = True,
        on_window: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(url, claim_strategy="read_then_insert", stale_after_s=stale_after_s, create=create)
        self.on_window = on_window or _announce_window

    def claim(
        self,
        key: str,
        *,
        thread: str | None = None,
        node: str | None = None,
        occurrence: int | None = None,
        payload: Any = None,
        payload_digest: str | None = None,
    ) -> Claim:
        digest = payload_digest or (payload_hash(payload) if payload is not None else None)
        owner = _owner_token()
        with self.engine.connect() as conn:  # the read, committed on its own
            rec = self._row(conn, key, lock=False)
            conn.commit()
        if rec is not None:
            with self._tx() as conn:
                return self._existing(conn, rec, digest, owner, time.time())
        self.on_window()  # the window: another caller may read "no row" right now
        now = time.time()
        values = _claim_row(key, thread, node, occurrence, digest, owner, now)
        stmt = self._insert().values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["key"],
            set_={"owner": owner, "updated_at": now, "claims": self.states.c.claims + 1},
        )
        with self._tx() as conn:
            conn.execute(stmt)
            new = self._row(conn, key, lock=False)
            assert new is not None
            self._log(conn, new, EV_CLAIMED, owner, now)
        return Claim("claimed", new)


def _announce_window() -> None:
    from killdrill.agent import boundary

    boundary("after:effects.claim_read")


def _claim_row(
    key: str,
    thread: str | None,
    node: str | None,
    occurrence: int | None,
    digest: str | None,
    owner: str,
    now: float,
) -> dict[str, Any]:
    """The row of a fresh claim: in flight, owned by this process, nothing replayed yet."""
    return dict(
        key=key,
        thread=thread,
        node=node,
        occurrence=occurrence,
        attempt=_attempt_from_env(),
        payload_hash=digest,
        status=IN_FLIGHT,
        result=None,
        owner=owner,
        replayed=False,
        replay_count=0,
        claims=1,
        created_at=now,
        updated_at=now,
        completed_at=None,
    )


def _record(row: Any) -> EffectRecord:
    d = dict(row)
    d["result"] = json.loads(d["result"]) if d.get("result") is not None else None
    d["replayed"] = bool(d["replayed"])
    return EffectRecord(**d)
