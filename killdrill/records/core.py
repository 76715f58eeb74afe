"""The facts of one case: the names other code relies on (violation kinds, outcomes), a fake's
call, the ledger's snapshot, an attempt and its trace, a violation."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class StableName(str, enum.Enum):
    """A name other code relies on (JSON, junit properties, tests): compares, hashes, formats and
    serializes as its string, so ``kind == "hang"`` and ``json.dumps`` keep working."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class ViolationKind(StableName):
    """Why a case is not exactly-once (docs: ARCHITECTURE.md, "Stable names")."""

    DUPLICATE_EFFECT = "duplicate_effect"
    KEY_CHANGED = "key_changed"
    KEY_REUSED = "key_reused"
    MISSING_EFFECT = "missing_effect"
    UNEXPECTED_EFFECT = "unexpected_effect"
    STATE_DIVERGED = "state_diverged"
    STUCK_IN_FLIGHT = "stuck_in_flight"
    POINT_NOT_REACHED = "point_not_reached"
    RESUME_FAILED = "resume_failed"
    HANG = "hang"
    HARNESS_ERROR = "harness_error"
    COMPENSATION_ORDER = "compensation_order"  # opt-in check (--check compensation_order)


DUPLICATE_EFFECT = ViolationKind.DUPLICATE_EFFECT
KEY_CHANGED = ViolationKind.KEY_CHANGED
KEY_REUSED = ViolationKind.KEY_REUSED
MISSING_EFFECT = ViolationKind.MISSING_EFFECT
UNEXPECTED_EFFECT = ViolationKind.UNEXPECTED_EFFECT
STATE_DIVERGED = ViolationKind.STATE_DIVERGED
STUCK_IN_FLIGHT = ViolationKind.STUCK_IN_FLIGHT
POINT_NOT_REACHED = ViolationKind.POINT_NOT_REACHED
RESUME_FAILED = ViolationKind.RESUME_FAILED
HANG = ViolationKind.HANG
HARNESS_ERROR = ViolationKind.HARNESS_ERROR
COMPENSATION_ORDER = ViolationKind.COMPENSATION_ORDER
VIOLATION_KINDS = tuple(ViolationKind)


class Verdict(StableName):
    """A case's verdict, as text, JSON and JUnit say it."""

    EXACTLY_ONCE = "exactly-once"
    VIOLATED = "violated"


# Outcomes of a fake provider call, as recorded in the ledger.
CREATED = "created"  # the effect happened now
REPLAYED = "replayed"  # same key, same payload: the stored result was returned, nothing happened
REJECTED = "rejected"  # same key, other payload: idempotency error, nothing happened
CONFLICT = "conflict"  # the key's first request is still in flight: 409, nothing happened
FAILED = "failed"  # an injected fault before the effect: nothing happened
ANSWERED = "answered"  # a model call the model fake answered: work, never an effect


@dataclass(frozen=True, init=False)
class Call:
    """One call a fake provider received, committed before the fake answered."""

    seq: int
    provider: str
    op: str
    key: str | None
    payload: dict[str, Any]
    outcome: str
    effect_id: str | None
    attempt: int
    pid: int
    time: float
    # What the durable runtime called the code that made the call (killdrill.agent.in_runtime:
    # an activity, its own attempt number), None outside one.
    context: dict[str, Any] | None = None

    def __init__(
        self,
        seq: int,
        provider: str,
        op: str,
        key: str | None,
        payload: dict[str, Any],
        outcome: str,
        effect_id: str | None,
        attempt: int,
        pid: int,
        time: float,
        context: dict[str, Any] | None = None,
    ) -> None:
        # frozen, but read 10^5 times per ledger: one dict update instead of the
        # generated __init__'s eleven object.__setattr__ calls (a third of reading a ledger)
        self.__dict__.update(
            seq=seq,
            provider=provider,
            op=op,
            key=key,
            payload=payload,
            outcome=outcome,
            effect_id=effect_id,
            attempt=attempt,
            pid=pid,
            time=time,
            context=context,
        )

    @property
    def replayed(self) -> bool:
        return self.outcome == REPLAYED

    @property
    def landed(self) -> bool:
        """Did this call cause the external effect (as opposed to replay or refuse it)?"""
        return self.outcome == CREATED

    def to_dict(self) -> dict[str, Any]:
        """Shallow (the payload is shared, not copied): JSON-safe as read from the ledger, and
        ``asdict``'s deep copy was most of a 10^5-call report.  Do not mutate it."""
        d = dict(self.__dict__)
        d["replayed"] = self.outcome == REPLAYED
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Call:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class InFlight:
    """An idempotency key whose first request never finished (left by a killed caller)."""

    provider: str
    op: str
    key: str
    attempt: int
    since: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)  # plain fields: asdict's recursion and deep copies cost

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InFlight:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class LedgerSnapshot:
    """Everything the fakes recorded for one thread: calls in order, final kv state, keys in flight."""

    calls: tuple[Call, ...] = ()
    state: dict[str, Any] = field(default_factory=dict)
    in_flight: tuple[InFlight, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": [c.to_dict() for c in self.calls],
            "state": self.state,
            "in_flight": [f.to_dict() for f in self.in_flight],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LedgerSnapshot:
        return cls(
            calls=tuple(Call.from_dict(c) for c in d.get("calls", ())),
            state=dict(d.get("state", {})),
            in_flight=tuple(InFlight.from_dict(f) for f in d.get("in_flight", ())),
        )


@dataclass(frozen=True)
class TraceEvent:
    """A boundary an attempt reached: point, its occurrence in that attempt, ms since spawn."""

    point: str
    occurrence: int
    t_ms: float
    pid: int

    @property
    def label(self) -> str:
        return self.point if self.occurrence == 1 else f"{self.point}#{self.occurrence}"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)  # plain fields: asdict's recursion and deep copies cost

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceEvent:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


class AttemptOutcome(StableName):
    """How an attempt ended. Where an outcome is also a violation, it has the violation's name."""

    KILLED = "killed"  # killed by the schedule, as planned
    EXITED = "exited"  # exited on its own (see returncode)
    DRAINED = "drained"  # exited with the drained status after a --signal TERM
    HANG = "hang"  # killed by the per-attempt timeout
    POINT_NOT_REACHED = "point_not_reached"  # exited before the scheduled kill could land
    HARNESS_ERROR = "harness_error"  # spawn failed, control channel abuse, ...


KILLED = AttemptOutcome.KILLED
EXITED = AttemptOutcome.EXITED
DRAINED = AttemptOutcome.DRAINED


@dataclass(frozen=True)
class Attempt:
    """One process launch of a case."""

    number: int
    kill: str | None  # the schedule's kill for this attempt, as text (None: ran free)
    outcome: str  # one of the constants above
    returncode: int | None
    duration_ms: float
    trace: tuple[TraceEvent, ...] = ()
    killed_at: str | None = None  # label of the point where the kill landed (or "offset:..")
    signal: str | None = None  # the signal that ended it, if the harness sent one
    stdout_tail: str = ""
    stderr_tail: str = ""
    notes: tuple[str, ...] = ()
    # Exited 0 while the integration saw the thread unfinished: the tasks it saw pending
    # (the checkpointer's pending tasks); empty when finished or not known.
    unfinished: tuple[str, ...] = ()
    # The deployment's process this launch was (a ``--serve`` service or replica, ``driver``);
    # None: the one command of a drill without services.
    process: str | None = None
    # A power loss after this attempt (``powerloss:POINT``): each file whose unsynced data it
    # dropped ({path, size_seen, size_kept, unsynced_bytes, ever_synced}; faults.powerloss).
    lost_writes: tuple[dict[str, Any], ...] = ()
    # The dependencies a ``restart=`` killed and started again when this attempt reached its
    # trigger, those with no attempt of their own (an integration's service, named as its integration).
    restarted: tuple[str, ...] = ()

    @property
    def ended(self) -> str:
        """How its process ended, in words: ``exited 1``, ``died of signal 9``, ``ended`` (no status)."""
        if self.returncode is None:
            return "ended"
        if self.returncode < 0:
            return f"died of signal {-self.returncode}"
        return f"exited {self.returncode}"

    def to_dict(self, *, trace: bool = True) -> dict[str, Any]:
        """``trace=False``: its trace left out (``[]``; an abridged case, see :data:`FULL_CLEAN_CASES`)."""
        d = dict(self.__dict__)  # shallow: every field but trace and notes is plain
        d["trace"] = [e.to_dict() for e in self.trace] if trace else []
        d["notes"] = list(self.notes)
        d["unfinished"] = list(self.unfinished)
        d["lost_writes"] = [dict(w) for w in self.lost_writes]
        d["restarted"] = list(self.restarted)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Attempt:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["trace"] = tuple(TraceEvent.from_dict(e) for e in d.get("trace", ()))
        kw["notes"] = tuple(d.get("notes", ()))
        kw["unfinished"] = tuple(d.get("unfinished", ()))
        kw["lost_writes"] = tuple(dict(w) for w in d.get("lost_writes", ()))
        kw["restarted"] = tuple(d.get("restarted", ()))
        return cls(**kw)


@dataclass(frozen=True)
class Violation:
    """One broken promise, named by a stable kind, with the evidence a person needs.

    ``cause`` (a stable name, ``killdrill.verdict.causes.CauseName``), ``observed`` (what the drill
    saw that names it) and ``fix`` (what to change) are the diagnosis; ``consequences`` are the
    violations of other effects that differ from the baseline only by a value this one produced
    (the charge id in a webhook body): listed under it, never counted on their own."""

    kind: str
    message: str
    provider: str | None = None
    op: str | None = None
    identity: dict[str, Any] | None = None
    calls: tuple[Call, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    cause: str | None = None
    observed: str = ""
    fix: str = ""
    consequences: tuple[Violation, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "provider": self.provider,
            "op": self.op,
            "identity": self.identity,
            "calls": [c.to_dict() for c in self.calls],
            "detail": self.detail,
            "cause": self.cause,
            "observed": self.observed,
            "fix": self.fix,
            "consequences": [v.to_dict() for v in self.consequences],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Violation:
        return cls(
            kind=d["kind"],
            message=d["message"],
            provider=d.get("provider"),
            op=d.get("op"),
            identity=d.get("identity"),
            calls=tuple(Call.from_dict(c) for c in d.get("calls", ())),
            detail=dict(d.get("detail", {})),
            cause=d.get("cause"),
            observed=d.get("observed") or "",
            fix=d.get("fix") or "",
            consequences=tuple(Violation.from_dict(v) for v in d.get("consequences", ())),
        )
