"""Plain data exchanged between the supervisor, the ledger, the verdict and the reports.

Everything here is a frozen value with ``to_dict``/``from_dict``, so a case can be
written as JSON, read back (``killdrill report``), and shipped between chaos worker
processes without pickling live objects.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable
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
    # Temporal's activity, its own attempt number), None outside one.
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
        # frozen, but read 10^5 times per ledger (issue 23): one dict update instead of the
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
        ``asdict``'s deep copy was most of a 10^5-call report (issue 23).  Do not mutate it."""
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
        return dict(self.__dict__)  # plain fields: asdict's recursion and deep copies cost (issue 23)

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
        return dict(self.__dict__)  # plain fields: asdict's recursion and deep copies cost (issue 23)

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
    # (LangGraph: the checkpointer's snap.tasks); empty when finished or not known.
    unfinished: tuple[str, ...] = ()
    # The deployment's process this launch was (a ``--serve`` service or replica, ``driver``);
    # None: the one command of a drill without services.
    process: str | None = None

    def to_dict(self, *, trace: bool = True) -> dict[str, Any]:
        """``trace=False``: its trace left out (``[]``; an abridged case, see :data:`FULL_CLEAN_CASES`)."""
        d = dict(self.__dict__)  # shallow: every field but trace and notes is plain (issue 23)
        d["trace"] = [e.to_dict() for e in self.trace] if trace else []
        d["notes"] = list(self.notes)
        d["unfinished"] = list(self.unfinished)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Attempt:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["trace"] = tuple(TraceEvent.from_dict(e) for e in d.get("trace", ()))
        kw["notes"] = tuple(d.get("notes", ()))
        kw["unfinished"] = tuple(d.get("unfinished", ()))
        return cls(**kw)


@dataclass(frozen=True)
class Violation:
    """One broken promise, named by a stable kind, with the evidence a person needs.

    ``cause`` (a stable name, ``killdrill.verdict.diagnosis.Cause``), ``observed`` (what the drill
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


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case: a schedule of kills applied to fresh runs of one command.

    ``ok`` is True when every logical effect landed exactly once and the run completed.
    ``text()`` is written for a person at 3 a.m.; ``assert_exactly_once()`` raises it.
    """

    command: tuple[str, ...]
    schedule: str
    thread: str
    workdir: str
    attempts: tuple[Attempt, ...] = ()
    violations: tuple[Violation, ...] = ()
    notes: tuple[str, ...] = ()
    reproduce: str = ""  # the one-line `killdrill run ...` that replays this case
    summary: dict[str, dict[str, int]] = field(default_factory=dict)  # provider -> counts
    ledger: LedgerSnapshot | None = None
    seed: int | None = None
    extra_reproduce: tuple[str, ...] = ()  # e.g. the pytest node id with --killdrill-point
    model: dict[str, Any] = field(default_factory=dict)  # model calls/tokens, re-spent (model_work.py)
    baseline: str = ""  # which clean run judged it, and why (the baseline mode)
    abridged: bool = False  # kept without its ledger and traces (a clean case past FULL_CLEAN_CASES)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def kinds(self) -> tuple[str, ...]:
        """Distinct violation kinds, in order of first appearance."""
        return tuple(dict.fromkeys(v.kind for v in self.violations))

    def text(self) -> str:
        """The verdict for a person (``killdrill.report.drill.render_case``)."""
        return presenter().case(self)

    def assert_exactly_once(self) -> CaseResult:
        __tracebackhide__ = True  # pytest shows the test's line and the verdict, not this frame
        if self.violations:
            raise ExactlyOnceViolation(self)
        return self

    def to_dict(self, *, abridged: bool = False) -> dict[str, Any]:
        """``abridged``: without the ledger and the attempts' traces, marked ``"abridged": true``
        (a clean case past :data:`FULL_CLEAN_CASES` of a drill's JSON report)."""
        abridged = abridged or self.abridged
        d = self._dict(abridged)
        if abridged:
            d["abridged"] = True
        return d

    def abridge(self) -> CaseResult:
        """This case without its ledger and its attempts' traces (what ``to_dict(abridged=True)``
        writes): a job keeps its clean runs so, past the first :data:`FULL_CLEAN_CASES`."""
        from dataclasses import replace

        attempts = tuple(replace(a, trace=()) for a in self.attempts)
        return replace(self, ledger=None, attempts=attempts, abridged=True)

    def _dict(self, abridged: bool) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "schedule": self.schedule,
            "verdict": Verdict.EXACTLY_ONCE if self.ok else Verdict.VIOLATED,
            "thread": self.thread,
            "workdir": self.workdir,
            "attempts": [a.to_dict(trace=not abridged) for a in self.attempts],
            "violations": [v.to_dict() for v in self.violations],
            "notes": list(self.notes),
            "reproduce": self.reproduce,
            "extra_reproduce": list(self.extra_reproduce),
            "summary": self.summary,
            "ledger": self.ledger.to_dict() if self.ledger and not abridged else None,
            "seed": self.seed,
            "model": self.model,
            "baseline": self.baseline,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseResult:
        return cls(
            command=tuple(d["command"]),
            schedule=d["schedule"],
            thread=d["thread"],
            workdir=d["workdir"],
            attempts=tuple(Attempt.from_dict(a) for a in d.get("attempts", ())),
            violations=tuple(Violation.from_dict(v) for v in d.get("violations", ())),
            notes=tuple(d.get("notes", ())),
            reproduce=d.get("reproduce", ""),
            summary=dict(d.get("summary", {})),
            ledger=LedgerSnapshot.from_dict(d["ledger"]) if d.get("ledger") else None,
            seed=d.get("seed"),
            extra_reproduce=tuple(d.get("extra_reproduce", ())),
            model=dict(d.get("model") or {}),
            baseline=d.get("baseline", ""),
            abridged=bool(d.get("abridged", False)),
        )


class ExactlyOnceViolation(AssertionError):
    """Raised by :meth:`CaseResult.assert_exactly_once`; its message is the verdict text."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.text())
        self.result = result


@dataclass(frozen=True)
class CatalogueEntry:
    """A kill point a clean run reached: its label (``before:x#2``) and when (ms since spawn)."""

    label: str
    point: str
    occurrence: int
    t_ms: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)  # plain fields: asdict's recursion and deep copies cost (issue 23)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CatalogueEntry:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


SHARED_BASELINE = "shared"
"""Baseline mode: every case (each under a fresh thread) is judged against the first clean run."""
PER_THREAD_BASELINE = "per-thread"
"""Baseline mode: the clean runs did different work under different threads, so each case runs
under the thread of a clean run that reached its point and is judged against that run."""


@dataclass(frozen=True)
class CleanRun:
    """One clean discovery run kept as a baseline: its thread, the points it reached, its ledger."""

    thread: str
    catalogue: tuple[CatalogueEntry, ...]
    baseline: LedgerSnapshot

    def labels(self) -> list[str]:
        return [e.label for e in self.catalogue]

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "catalogue": [e.to_dict() for e in self.catalogue],
            "baseline": self.baseline.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CleanRun:
        return cls(
            thread=d["thread"],
            catalogue=tuple(CatalogueEntry.from_dict(e) for e in d["catalogue"]),
            baseline=LedgerSnapshot.from_dict(d["baseline"]),
        )


@dataclass(frozen=True)
class Discovery:
    """What clean runs of a command showed: the kill-point catalogue and the baseline ledger.

    ``volatile`` names, per ``provider.op``, payload fields that differed between two clean
    runs of the same work (a model's wording, a timestamp): left out of the default identity.
    ``mode`` is :data:`SHARED_BASELINE` or :data:`PER_THREAD_BASELINE` (the work depends on the
    thread: ``runs`` holds each clean run, ``mode_reason`` says what differed).
    """

    command: tuple[str, ...]
    catalogue: tuple[CatalogueEntry, ...]
    baseline: LedgerSnapshot
    volatile: dict[str, list[str]] = field(default_factory=dict)
    duration_ms: float = 0.0
    mode: str = SHARED_BASELINE
    mode_reason: str = ""
    runs: tuple[CleanRun, ...] = ()

    def labels(self) -> list[str]:
        """Every point a clean run reached: the first run's in order, then any only others reached."""
        labels = [e.label for e in self.catalogue]
        if self.mode == PER_THREAD_BASELINE:
            for run in self.runs:
                labels.extend(lb for lb in run.labels() if lb not in labels)
        return labels

    def run_for(self, label: str | None) -> CleanRun | None:
        """Per-thread mode: the clean run whose thread reached ``label`` (the first one if none
        is named or none did); None in the shared mode."""
        if self.mode != PER_THREAD_BASELINE or not self.runs:
            return None
        if label is not None:
            for run in self.runs:
                if label in run.labels():
                    return run
        return self.runs[0]

    def counts(self) -> dict[str, int]:
        """Point (without occurrence) -> how many times a clean run reached it."""
        out: dict[str, int] = {}
        for e in self.catalogue:
            out[e.point] = out.get(e.point, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "catalogue": [e.to_dict() for e in self.catalogue],
            "baseline": self.baseline.to_dict(),
            "volatile": self.volatile,
            "duration_ms": self.duration_ms,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "runs": [r.to_dict() for r in self.runs],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Discovery:
        return cls(
            command=tuple(d["command"]),
            catalogue=tuple(CatalogueEntry.from_dict(e) for e in d["catalogue"]),
            baseline=LedgerSnapshot.from_dict(d["baseline"]),
            volatile={k: list(v) for k, v in d.get("volatile", {}).items()},
            duration_ms=d.get("duration_ms", 0.0),
            mode=d.get("mode", SHARED_BASELINE),
            mode_reason=d.get("mode_reason", ""),
            runs=tuple(CleanRun.from_dict(r) for r in d.get("runs", ())),
        )


FULL_CLEAN_CASES = 60
"""Clean cases a drill's JSON report keeps in full (with ledger and traces); the HTML report
draws as many clean timelines (``killdrill.report.html.MAX_TIMELINES``)."""


@dataclass(frozen=True)
class DrillResult:
    """A whole drill: the discovery and one case per kill point (or per schedule given)."""

    discovery: Discovery
    cases: tuple[CaseResult, ...] = ()

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    def text(self) -> str:
        """The drill's table and summary for a person (``killdrill.report.drill.render_drill``)."""
        return presenter().drill(self)

    def to_dict(self) -> dict[str, Any]:
        """The drill's JSON: failing cases and the first :data:`FULL_CLEAN_CASES` clean ones in
        full, later clean ones abridged (no ledger, no traces), so the report grows linearly with
        the catalogue (each case of an N-step agent holds N calls and N boundaries: issue 23)."""
        clean = itertools.count(1)
        return {
            "discovery": self.discovery.to_dict(),
            "cases": [c.to_dict(abridged=c.ok and next(clean) > FULL_CLEAN_CASES) for c in self.cases],
            "summary": presenter().summary(self.cases),
        }


@dataclass(frozen=True)
class Presenter:
    """How results become text and summaries.

    Records are plain data at the bottom of the package; the rendering (:mod:`killdrill.report.drill`)
    sits above the verdict it quotes.  ``report`` installs itself here when imported (and
    :mod:`killdrill.drill`, which makes every result, imports it), so ``CaseResult.text()`` stays
    the one-call convenience it has always been without records importing upward.
    """

    case: Callable[[CaseResult], str]
    drill: Callable[[DrillResult], str]
    summary: Callable[[Iterable[CaseResult]], dict[str, Any]]


_presenter: Presenter | None = None


def install_presenter(p: Presenter) -> None:
    """Called once by :mod:`killdrill.report.drill` at import."""
    global _presenter
    _presenter = p


def presenter() -> Presenter:
    if _presenter is None:  # records alone imported (``from killdrill.records import CaseResult``)
        import importlib

        importlib.import_module("killdrill.report.drill")  # installs the presenter; by name: records
        # sits below the report in the layers, and this is the one place that renders a result
    assert _presenter is not None

    return _presenter
