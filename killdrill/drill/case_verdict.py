"""The verdict of one case beyond the effect check: how each attempt ended, a thread's own
baseline when the shared one was the wrong yardstick, and resumes that restarted from scratch."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence

from killdrill.drill.discovery import Discoverer
from killdrill.drill.env import last_line, slug
from killdrill.errors import HarnessError
from killdrill.integrations import findings_in, internal_steps
from killdrill.points import Schedule, occurrence_label
from killdrill.records import (
    HANG,
    HARNESS_ERROR,
    KILLED,
    MISSING_EFFECT,
    POINT_NOT_REACHED,
    RESUME_FAILED,
    UNEXPECTED_EFFECT,
    Attempt,
    AttemptOutcome,
    CatalogueEntry,
    LedgerSnapshot,
    Violation,
)
from killdrill.verdict import EffectNaming, judge
from killdrill.verdict.baselines import repeated_calls, workload_difference


class CaseJudge:
    """The verdict of a case: its effects against the right baseline, and how each attempt ended."""

    def __init__(self, discoverer: Discoverer) -> None:
        self.discoverer = discoverer
        self.options = discoverer.options

    def effects(
        self,
        baseline: LedgerSnapshot,
        ledger: LedgerSnapshot,
        attempts: Sequence[Attempt],
        violations: Sequence[Violation],
        completed: bool,
    ) -> list[Violation]:
        """The effect verdict, unless the case never got going (a hang, a kill that missed)."""
        if not completed and any(v.kind in (HANG, POINT_NOT_REACHED) for v in violations):
            return []
        return judge(baseline, ledger, attempts, naming=self.naming(), checks=self.options.checks)

    def naming(self) -> EffectNaming:
        """How this drill names an effect: the ``--identity`` fields, else the payload without the
        fields its clean runs showed to be volatile."""
        identity = {**self.discoverer.setup.effect_rows.naming(), **self.options.identity}
        return EffectNaming(identity, self.discoverer.discover().volatile)

    def own_thread_baseline(
        self, thread: str, baseline: LedgerSnapshot, sched: Schedule
    ) -> tuple[LedgerSnapshot, str, bool] | None:
        """A clean run under ``thread`` (own workdir and ledger), if it did other work than the
        shared baseline (then True: a point it never reaches is not the case's fault), or if one
        discovery run could not have told thread-derived values apart (False: the same work, so a
        point the case did not reach still stands); None when the violations stand as judged."""
        try:
            attempt, snap = self.discoverer.clean_run(thread, f"own-thread-{slug(str(sched))}", private=True)
        except HarnessError:
            return None
        discovery = self.discoverer.discover()
        differ = workload_difference(discovery.labels(), baseline, [e.label for e in attempt.trace], snap)
        if differ:
            return snap, f"the shared baseline's thread did other work: {differ}; one extra clean run", True
        if self.options.discovery_runs < 2:
            # One clean run cannot tell a value derived from the thread (a ref hashed from it) from
            # one the resume recomputed: the case's own thread is the yardstick (never more lenient
            # on counts: a duplicate or a recomputed payload still differs from it).
            return snap, "one discovery run cannot tell thread-derived values; one extra clean run", False
        return None

    def attempt_violation(self, a: Attempt) -> Violation | None:
        """How attempt ``a`` ended, when that alone is a verdict (a kill that missed, a hang)."""
        if a.outcome == AttemptOutcome.POINT_NOT_REACHED:
            why = "; ".join(a.notes) or f"the attempt {a.ended} before reaching it"
            return Violation(
                POINT_NOT_REACHED,
                f"attempt {a.number} was scheduled to be killed at {a.kill} but {why}"
                + (f"; stderr ends with: {last_line(a.stderr_tail)}" if a.returncode else ""),
                detail={"attempt": a.number, "kill": a.kill, "returncode": a.returncode},
            )
        if a.outcome == AttemptOutcome.HANG:
            where = a.trace[-1].label if a.trace else "before its first boundary"
            found = findings_in(a.stderr_tail)
            if found:  # an integration said why the run cannot go on (a runtime's version rule)
                return Violation(
                    RESUME_FAILED,
                    f"attempt {a.number} never finished: {found[0].text} (no exit within "
                    f"{self.options.timeout:g}s, last boundary: {where}; its process tree was killed)",
                    detail={"attempt": a.number, "last_boundary": where, "cause": found[0].cause},
                )
            return Violation(
                HANG,
                f"attempt {a.number} hung: no exit within {self.options.timeout:g}s "
                f"(last boundary: {where}); its process tree was killed",
                detail={"attempt": a.number, "last_boundary": where},
            )
        if a.outcome == AttemptOutcome.HARNESS_ERROR:
            return Violation(
                HARNESS_ERROR,
                f"attempt {a.number}: {'; '.join(a.notes) or 'harness failure'}",
                detail={"attempt": a.number},
            )
        return None

    @staticmethod
    def resume_notes(
        catalogue: Sequence[CatalogueEntry], attempts: Sequence[Attempt], ledger: LedgerSnapshot | None
    ) -> list[str]:
        """Flag a resume that restarted from scratch and re-did work a checkpoint held.

        Agents legitimately re-enter at their first boundary (a functional API entrypoint, a
        tool loop's first node) and skip what is done, so re-entry alone says nothing.  The
        note needs repeated work: a step committed more often over the case's attempts than
        in a clean run.  A step counts as committed at its ``committed:`` point, or, for agents
        that emit none, when the next step began (``before:`` after an ``after:``): a kill at
        ``after:X`` alone is before X's checkpoint, and re-running X is then correct.
        """
        clean = Counter(committed_steps(e.point for e in catalogue))
        done: Counter[str] = Counter()
        if attempts:
            done.update(committed_steps(e.point for e in attempts[0].trace))
        notes = []
        first = first_step(e.label for e in catalogue)
        for prev, nxt in itertools.pairwise(attempts):
            done.update(committed_steps(e.point for e in nxt.trace))
            redone = sorted(step for step in done if done[step] > clean[step])
            if not (
                prev.outcome == KILLED
                and redone
                and first
                and first_step(e.label for e in nxt.trace) == first
            ):
                continue
            again = repeated_calls(ledger, nxt.number) if ledger is not None else []
            calls = (
                f", repeating {len(again)} earlier call(s)"
                f" ({', '.join(dict.fromkeys(f'{c.provider}.{c.op}' for c in again))})"
                if again
                else ""
            )
            notes.append(
                f"resumed_from_start: attempt {nxt.number} re-entered at {first} after attempt "
                f"{prev.number} was killed at {prev.killed_at}, and re-did committed steps"
                f" ({', '.join(redone[:3])}: more often than in a clean run){calls}: is the input"
                " re-submitted instead of resuming from the checkpoint?"
            )
            break  # one note says it; later attempts repeat the same story
        return notes


def first_label(sched: Schedule) -> str | None:
    """The label of the schedule's first kill when it names a point (``before:x#2``), else None."""
    first = sched.faults[0] if sched.faults else None
    if first is None or first.point is None:
        return None
    return occurrence_label(first.point, first.occurrence)


def workload_shaped(violations: Sequence[Violation], sched: Schedule) -> bool:
    """Violations another thread's work could explain: an effect missing or unasked, or a first
    kill at a named point that never landed (a random offset that missed says nothing)."""
    named = first_label(sched) is not None
    return any(
        v.kind in (MISSING_EFFECT, UNEXPECTED_EFFECT)
        or (named and v.kind == POINT_NOT_REACHED and v.detail.get("attempt") == 1)
        for v in violations
    )


def first_step(labels: Iterable[str]) -> str | None:
    """The first ``before:`` of a step (an integration's own points such as ``before:checkpoint`` aside)."""
    internal = internal_steps()
    steps = (lb for lb in labels if lb.startswith("before:"))
    return next((lb for lb in steps if lb.split("#")[0].split(":", 1)[1] not in internal), None)


def committed_steps(points: Iterable[str]) -> list[str]:
    """The steps one attempt (or a clean run) committed, in order: ``committed:X`` points, or for
    agents that emit none, an ``after:X`` followed by the next step's ``before:``."""
    internal = internal_steps()
    # one partition per point, the others (during:, a batch's thousands) skipped at once
    steps = [
        (kind, name)
        for kind, _, name in (p.partition(":") for p in points)
        if kind in _STEP_KINDS and name not in internal  # e.g. the checkpointer's own
    ]
    committed = [name for kind, name in steps if kind == "committed"]
    if committed:
        return committed
    out: list[str] = []
    pending: str | None = None
    for kind, name in steps:
        if kind == "after":
            pending = name
        elif kind == "before" and pending is not None:
            out.append(pending)
            pending = None
    return out


_STEP_KINDS = frozenset({"before", "after", "committed"})
