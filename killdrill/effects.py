"""Durable effects: stable idempotency keys, a claim-before-send result store, gates, sagas.

Delivery cannot be exactly-once; the *effect* can, when every attempt sends the same key
and the receiver (or this store, for receivers that honour no key) replays the stored
result.  The pieces:

- :func:`idempotency_key` derives a key from *what the action is* (thread, node, which
  occurrence, canonical payload), never from when or where it runs, so a resumed
  attempt sends the same key as the killed one.
- :class:`ResultStore` records intent *before* the effect (``claim``) under a unique
  constraint, so two racing resumers cannot both win, and keeps the result after it
  (``complete``).  Every transition is also appended to an event log that
  ``killdrill audit`` reads.
- :func:`durable_effect` for providers that honour keys (re-send on doubt: they replay),
  :func:`gate` for irreversible effects (at most once, reconciled by a lookup), and
  :func:`run_saga` for compensations that themselves run at most once, in reverse.

:class:`RacyResultStore` is a *planted defect* (read, then insert, with a window): it
exists so the concurrency drill and the detection corpus have something real to catch.
Never use it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

__all__ = [
    "EVENTS_TABLE",
    "EV_CLAIMED",
    "EV_RECLAIMED",
    "EV_RECONCILED",
    "EV_RELEASED",
    "EV_REPLAYED",
    "EV_SUCCEEDED",
    "IN_FLIGHT",
    "RELEASED",
    "STATES_TABLE",
    "SUCCEEDED",
    "Claim",
    "EffectAlreadyInFlight",
    "EffectError",
    "EffectEvent",
    "EffectRecord",
    "KeyReuseError",
    "RacyResultStore",
    "ResultStore",
    "SagaFailed",
    "SagaResult",
    "SagaStep",
    "StepRejected",
    "TransportNotSent",
    "canonical_json",
    "durable_effect",
    "gate",
    "idempotency_key",
    "make_engine",
    "payload_hash",
    "run_saga",
    "sqlalchemy_url",
]

T = TypeVar("T")

IN_FLIGHT = "in_flight"
SUCCEEDED = "succeeded"
RELEASED = "released"

# Event kinds appended to the log (the audit counts them).
EV_CLAIMED = "claimed"  # a fresh claim: this caller is about to perform the effect
EV_RECLAIMED = "reclaimed"  # a released claim claimed again, or an abandoned one taken over
EV_SUCCEEDED = "succeeded"  # the caller performed the effect and stored the result: a fresh success
EV_REPLAYED = "replayed"  # a succeeded key asked again: the stored result was returned
EV_RELEASED = "released"  # the request was provably not sent: the claim is given back
EV_RECONCILED = "reconciled"  # a claim left in flight was found delivered by a lookup

STATES_TABLE = "killdrill_effect_claims"
EVENTS_TABLE = "killdrill_effect_log"


# --------------------------------------------------------------------------- errors


class EffectError(RuntimeError):
    """Base of the toolkit's errors."""


class EffectAlreadyInFlight(EffectError):
    """The key's claim is in flight: another worker is on it, or a killed attempt left it.

    Re-sending could do the effect twice (the provider honours no key), so the caller
    must reconcile (look the effect up at the provider) instead of guessing.
    """

    def __init__(self, record: EffectRecord, *, owner_alive: bool | None) -> None:
        who = {True: "a live worker", False: "a dead attempt", None: "a worker on another host"}[owner_alive]
        super().__init__(
            f"effect {record.key!r} is in flight (claimed by {who}, attempt {record.attempt}); "
            "reconcile it with a lookup at the provider rather than re-sending"
        )
        self.record = record
        self.owner_alive = owner_alive


class KeyReuseError(EffectError):
    """The same key was claimed for a different payload: the key does not name one operation."""

    def __init__(self, key: str, stored: str | None, given: str | None) -> None:
        super().__init__(f"key {key!r} was claimed for payload {stored} and is now reused for {given}")
        self.key = key


class TransportNotSent(Exception):
    """Raised by a ``perform`` callable when the request provably never left (connection
    refused, DNS failure): the only case where giving the claim back is safe."""


class StepRejected(Exception):
    """Raised by a saga step's action when the provider definitively refused it (nothing was
    applied): the saga aborts and compensates the steps before it."""


# --------------------------------------------------------------------------- keys


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal payloads give equal text.

    Non-JSON values (datetimes, sets, objects) are refused rather than ``str()``-ed, since
    their text can change between attempts and silently change the key.
    """

    def refuse(obj: object) -> Any:
        raise TypeError(f"{type(obj).__name__} is not canonical JSON; convert it explicitly: {obj!r}")

    def check(obj: Any) -> None:
        if isinstance(obj, float) and not math.isfinite(obj):
            raise ValueError(f"non-finite float {obj!r} has no canonical JSON form")
        if isinstance(obj, dict):
            for k, v in obj.items():
                if not isinstance(k, str):
                    raise TypeError(f"payload keys must be strings, got {k!r}")
                check(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                check(v)

    check(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=refuse)


def payload_hash(payload: Any) -> str:
    """sha256 of the canonical JSON of ``payload`` (hex)."""
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def _slug(text: str, limit: int = 48) -> str:
    out = "".join(c if c.isalnum() or c in "_.-" else "_" for c in text)
    return out[:limit] or "effect"


def idempotency_key(thread_id: str, node_id: str, occurrence: int, payload: Any) -> str:
    """A key that is the same on every attempt of one logical operation and differs between two.

    Built from what the action *is*: the thread, the node, which occurrence of the effect
    within the node (0 for the first), and the canonical payload that identifies it (say
    account and billing cycle).  Never pass anything generated at run time (uuid4, the
    clock, a task id): the point is that a resumed attempt computes the same key.
    The node name is kept as a readable prefix: ``charge_customer-3f9a...`` (32 hex digits).
    """
    material = canonical_json(
        {"thread": thread_id, "node": node_id, "occurrence": occurrence, "payload": payload}
    )
    return f"{_slug(node_id)}-{hashlib.sha256(material.encode()).hexdigest()[:32]}"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class EffectRecord:
    """The current state of one key in the store."""

    key: str
    thread: str | None
    node: str | None
    occurrence: int | None
    attempt: int | None
    payload_hash: str | None
    status: str
    result: Any
    owner: str | None
    replayed: bool
    replay_count: int
    claims: int
    created_at: float
    updated_at: float
    completed_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EffectEvent:
    """One line of the append-only effect log."""

    id: int
    key: str
    event: str
    thread: str | None
    node: str | None
    occurrence: int | None
    attempt: int | None
    payload_hash: str | None
    owner: str | None
    at: float


@dataclass(frozen=True)
class Claim:
    """What ``claim`` found.

    ``state`` is ``claimed`` (the caller owns the claim and may perform the effect),
    ``succeeded`` (done before: ``record.result`` is the stored result, do nothing) or
    ``in_flight`` (someone claimed it and never finished; ``owner_alive`` says whether that
    worker is still running: True, False, or None when it cannot be told).
    """

    state: Literal["claimed", "succeeded", "in_flight"]
    record: EffectRecord
    owner_alive: bool | None = None
    taken_over: bool = False


# --------------------------------------------------------------------------- ownership

_token_cache: tuple[int, str] | None = None
_HOST = socket.gethostname()


def _process_token() -> str:
    """host:pid:start-time; the start time tells a reused pid from the original process."""
    global _token_cache
    pid = os.getpid()
    if _token_cache is None or _token_cache[0] != pid:
        import psutil

        _token_cache = (pid, f"{_HOST}:{pid}:{psutil.Process(pid).create_time():.2f}")
    return _token_cache[1]


def _owner_token() -> str:
    return f"{_process_token()}:{threading.get_ident()}"


def _owner_alive(owner: str | None) -> bool | None:
    """Is the worker that owns a claim still running?  None when it is on another host."""
    if not owner:
        return False
    try:
        host, pid_s, started, ident_s = owner.rsplit(":", 3)
        pid, ident = int(pid_s), int(ident_s)
    except ValueError:
        return None
    if host != _HOST:
        return None
    if pid == os.getpid():
        # Our own process: another thread may be working on it; this thread is not (it is here).
        if ident == threading.get_ident():
            return False
        return any(t.ident == ident for t in threading.enumerate())
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return f"{proc.create_time():.2f}" == started
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _attempt_from_env() -> int | None:
    raw = os.environ.get("KILLDRILL_ATTEMPT")
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


# --------------------------------------------------------------------------- engine


def sqlalchemy_url(url: str | os.PathLike[str]) -> str:
    """Accept a SQLAlchemy URL or a plain file path (an embedded SQLite database)."""
    text = os.fspath(url)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).resolve()}"


def make_engine(url: str | os.PathLike[str], *, immediate: bool = True) -> Engine:
    """An engine for the store.  On SQLite every transaction is ``BEGIN IMMEDIATE``: the write
    lock is taken at the start, so a claim's check and insert cannot interleave with another
    writer, and waiting writers queue on the busy timeout instead of failing to upgrade."""
    surl = sqlalchemy_url(url)
    if not surl.startswith("sqlite"):
        return sa.create_engine(surl, pool_pre_ping=True)
    engine = sa.create_engine(surl, connect_args={"timeout": 60})

    @sa.event.listens_for(engine, "connect")
    def _no_implicit_tx(dbapi_conn: Any, _rec: Any) -> None:
        # Let SQLAlchemy's "begin" event own transaction start (pysqlite would defer BEGIN).
        dbapi_conn.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _tables(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table]:
    states = sa.Table(
        STATES_TABLE,
        metadata,
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("thread", sa.String(255)),
        sa.Column("node", sa.String(255)),
        sa.Column("occurrence", sa.Integer),
        sa.Column("attempt", sa.Integer),
        sa.Column("payload_hash", sa.String(64)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result", sa.Text),
        sa.Column("owner", sa.String(255)),
        sa.Column("replayed", sa.Boolean, nullable=False, default=False),
        sa.Column("replay_count", sa.Integer, nullable=False, default=0),
        sa.Column("claims", sa.Integer, nullable=False, default=1),
        sa.Column("created_at", sa.Float(precision=53), nullable=False),
        sa.Column("updated_at", sa.Float(precision=53), nullable=False),
        sa.Column("completed_at", sa.Float(precision=53)),
    )
    events = sa.Table(
        EVENTS_TABLE,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(255), nullable=False, index=True),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("thread", sa.String(255)),
        sa.Column("node", sa.String(255)),
        sa.Column("occurrence", sa.Integer),
        sa.Column("attempt", sa.Integer),
        sa.Column("payload_hash", sa.String(64)),
        sa.Column("owner", sa.String(255)),
        sa.Column("at", sa.Float(precision=53), nullable=False),
    )
    return states, events


# --------------------------------------------------------------------------- store


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


# --------------------------------------------------------------------------- helpers


def _claim_waiting(store: ResultStore, key: str, wait_s: float, poll_s: float, **claim_kw: Any) -> Claim:
    """Claim; while a *live* worker holds the key, wait for it (up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        c = store.claim(key, **claim_kw)
        if c.state != "in_flight":
            return c
        if c.owner_alive is False:
            return c
        if time.monotonic() >= deadline:
            raise EffectAlreadyInFlight(c.record, owner_alive=c.owner_alive)
        time.sleep(poll_s)


def _perform(store: ResultStore, key: str, perform: Callable[[], T]) -> T:
    from killdrill.agent import boundary

    # The claim is committed, the request not sent: a kill here leaves the claim in flight with
    # nothing done, the case a resume must tell apart from "sent, answer lost".  Named, so a
    # drill reaches it on purpose rather than by a lucky random millisecond.
    boundary("after:effects.claim")
    try:
        result = perform()
    except (TransportNotSent, StepRejected):
        store.release(key)  # provably nothing was applied
        raise
    store.complete(key, result)
    return result


def durable_effect(
    store: ResultStore,
    key: str,
    perform: Callable[[], T],
    *,
    provider_honours_keys: bool,
    thread: str | None = None,
    node: str | None = None,
    occurrence: int | None = None,
    payload: Any = None,
    wait_s: float = 0.0,
    poll_s: float = 0.05,
) -> T:
    """Perform an effect at most once per ``key`` in this store, and remember its result.

    - succeeded before: return the stored result, the provider is not called;
    - fresh: claim, ``perform()`` (which must send ``key`` to the provider), store the result;
    - left in flight by a dead attempt: when the provider honours keys, take the claim over
      and re-send with the *same* key (the provider replays if the first request landed);
      otherwise raise :class:`EffectAlreadyInFlight` — only a lookup can tell, see :func:`gate`;
    - held by a live worker: wait up to ``wait_s`` for it, then :class:`EffectAlreadyInFlight`;
    - ``perform`` raises :class:`TransportNotSent` (or :class:`StepRejected`): the claim is
      released and the error re-raised.
      Any other error leaves the claim in flight: the request may have landed.
    """
    kw = dict(thread=thread, node=node, occurrence=occurrence, payload=payload)
    while True:
        c = _claim_waiting(store, key, wait_s, poll_s, **kw)
        if c.state == "succeeded":
            return c.record.result  # type: ignore[no-any-return]
        if c.state == "claimed":
            return _perform(store, key, perform)
        if not provider_honours_keys:
            raise EffectAlreadyInFlight(c.record, owner_alive=c.owner_alive)
        if store.take_over(c) is not None:
            return _perform(store, key, perform)
        # Another resumer took it over first: look again (it is live now, or done).


def gate(
    store: ResultStore,
    key: str,
    send: Callable[[], T],
    *,
    reconcile: Callable[[str], object] | None = None,
    thread: str | None = None,
    node: str | None = None,
    occurrence: int | None = None,
    payload: Any = None,
    wait_s: float = 0.0,
    poll_s: float = 0.05,
) -> T | Any:
    """At most once for an irreversible effect (an email, a delete): meant as the last step.

    A claim left in flight by a dead attempt is resolved by ``reconcile(key)`` — e.g.
    ``lambda k: mailbox.lookup(k)``: truthy means it was delivered (the claim is marked done;
    a non-bool truthy value is stored as the result), falsy means it was not (it is sent now).
    Without ``reconcile`` such a claim raises :class:`EffectAlreadyInFlight`: never guess.
    ``send`` must carry ``key`` as the provider-side reference that ``reconcile`` looks up.
    """
    kw = dict(thread=thread, node=node, occurrence=occurrence, payload=payload)
    while True:
        c = _claim_waiting(store, key, wait_s, poll_s, **kw)
        if c.state == "succeeded":
            return c.record.result
        if c.state == "claimed":
            return _perform(store, key, send)
        if reconcile is None:
            raise EffectAlreadyInFlight(c.record, owner_alive=c.owner_alive)
        if store.take_over(c) is None:
            continue
        found = reconcile(key)
        if found:
            result: Any = {"reconciled": True} if found is True else found
            store.complete(key, result, reconciled=True)
            return result
        return _perform(store, key, send)


# --------------------------------------------------------------------------- sagas


@dataclass(frozen=True)
class SagaStep:
    """One step of a saga: ``action(key)`` does it, ``compensate(key, result)`` undoes it.

    Both receive the idempotency key to send to the provider.  ``honours_keys`` says whether
    the action's provider replays a repeated key; if not, an action left in flight is
    resolved by ``reconcile`` (as in :func:`gate`).  Same for the compensation.
    """

    name: str
    action: Callable[[str], Any]
    compensate: Callable[[str, Any], Any] | None = None
    honours_keys: bool = False
    reconcile: Callable[[str], object] | None = None
    compensate_honours_keys: bool = False
    compensate_reconcile: Callable[[str], object] | None = None
    payload: Any = None


@dataclass(frozen=True)
class SagaResult:
    saga_id: str
    results: dict[str, Any] = field(default_factory=dict)


class SagaFailed(EffectError):
    """A step was rejected; the steps before it were compensated (in reverse order)."""

    def __init__(self, saga_id: str, failed_step: str, reason: str, compensated: list[str]) -> None:
        super().__init__(
            f"saga {saga_id!r} failed at step {failed_step!r} ({reason}); "
            f"compensated: {', '.join(compensated) or 'nothing'}"
        )
        self.saga_id = saga_id
        self.failed_step = failed_step
        self.reason = reason
        self.compensated = compensated


def _saga_key(saga_id: str, kind: str, name: str) -> str:
    return idempotency_key(saga_id, f"saga.{kind}.{name}", 0, {"saga": saga_id, "step": name})


def _run_step(
    store: ResultStore,
    key: str,
    fn: Callable[[], Any],
    *,
    honours_keys: bool,
    reconcile: Callable[[str], object] | None,
    saga_id: str,
    node: str,
    payload: Any,
) -> Any:
    if honours_keys:
        return durable_effect(
            store, key, fn, provider_honours_keys=True, thread=saga_id, node=node, payload=payload
        )
    return gate(store, key, fn, reconcile=reconcile, thread=saga_id, node=node, payload=payload)


def run_saga(store: ResultStore, saga_id: str, steps: Sequence[SagaStep]) -> SagaResult:
    """Run ``steps`` in order; if one raises :class:`StepRejected`, compensate the ones before it.

    The decision to abort is itself stored before any compensation runs, so a resumed
    attempt goes straight back to compensating (it does not retry the rejected step, which
    might succeed this time and leave half a saga).  Each action and each compensation goes
    through the store under its own key: at most once each, compensations in reverse order.
    Any other exception propagates untouched: it is ambiguous, and a resume will settle it.
    """
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"saga step names must be unique: {names}")
    abort_key = _saga_key(saga_id, "abort", "")
    aborted = store.get(abort_key)
    results: dict[str, Any] = {}
    if aborted is None or aborted.status != SUCCEEDED:
        for step in steps:
            key = _saga_key(saga_id, "step", step.name)
            try:
                results[step.name] = _run_step(
                    store,
                    key,
                    lambda step=step, key=key: step.action(key),  # type: ignore[misc]
                    honours_keys=step.honours_keys,
                    reconcile=step.reconcile,
                    saga_id=saga_id,
                    node=f"saga.{step.name}",
                    payload=step.payload,
                )
            except StepRejected as exc:
                record = {"failed_step": step.name, "reason": str(exc) or type(exc).__name__}
                # The abort decision is plain data: storing it twice writes the same row.
                if store.claim(abort_key, thread=saga_id, node="saga.abort").state != "succeeded":
                    store.complete(abort_key, record)
                aborted = store.get(abort_key)
                break
        else:
            return SagaResult(saga_id, results)
    assert aborted is not None and aborted.result is not None
    failed = aborted.result["failed_step"]
    compensated: list[str] = []
    for step in reversed(steps[: names.index(failed)]):
        done = store.get(_saga_key(saga_id, "step", step.name))
        if step.compensate is None or done is None or done.status != SUCCEEDED:
            continue
        key = _saga_key(saga_id, "compensate", step.name)
        _run_step(
            store,
            key,
            lambda step=step, key=key, r=done.result: step.compensate(key, r),  # type: ignore[misc]
            honours_keys=step.compensate_honours_keys,
            reconcile=step.compensate_reconcile,
            saga_id=saga_id,
            node=f"saga.compensate.{step.name}",
            payload=step.payload,
        )
        compensated.append(step.name)
    raise SagaFailed(saga_id, failed, aborted.result["reason"], compensated)
