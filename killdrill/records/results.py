"""The results of a drill: a case, a clean run, discovery, a drill; and the presenter that renders
them, installed by the drill (records import nothing above them)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from killdrill.errors import HarnessError
from killdrill.records.core import (
    Attempt,
    LedgerSnapshot,
    Verdict,
    Violation,
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
    # where the case's wall time went, in seconds per phase (killdrill.drill.phases), and the
    # runtime's waits inside them: {"label", "setting", "unit", "seconds"} from its integration
    phases: dict[str, float] = field(default_factory=dict)
    waits: tuple[dict[str, Any], ...] = ()

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
            "phases": self.phases,
            "waits": list(self.waits),
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
            phases=dict(d.get("phases") or {}),
            waits=tuple(d.get("waits") or ()),
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
        return dict(self.__dict__)  # plain fields: asdict's recursion and deep copies cost

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
        the catalogue (each case of an N-step agent holds N calls and N boundaries)."""
        clean = itertools.count(1)
        return {
            "discovery": self.discovery.to_dict(),
            "cases": [c.to_dict(abridged=c.ok and next(clean) > FULL_CLEAN_CASES) for c in self.cases],
            "summary": presenter().summary(self.cases),
        }


@dataclass(frozen=True)
class Presenter:
    """How results become text and summaries.

    Records are plain data at the bottom of the package; the rendering (:mod:`killdrill.report.drill`,
    its ``PRESENTER``) sits above the verdict it quotes, and :mod:`killdrill.drill`, which makes
    every result, installs it with :func:`install_presenter`: ``CaseResult.text()`` is one call
    while records import nothing above them, and importing the report changes nothing.
    """

    case: Callable[[CaseResult], str]
    drill: Callable[[DrillResult], str]
    summary: Callable[[Iterable[CaseResult]], dict[str, Any]]


_presenter: Presenter | None = None


def install_presenter(p: Presenter) -> None:
    """Called once by :mod:`killdrill.drill` (which makes every result) with the report's."""
    global _presenter
    _presenter = p


def presenter() -> Presenter:
    if _presenter is None:  # records alone imported (``from killdrill.records import CaseResult``)
        raise HarnessError(
            "a result renders through killdrill.report: import killdrill.drill (which installs "
            "killdrill.report.drill.PRESENTER) first"
        )
    return _presenter
