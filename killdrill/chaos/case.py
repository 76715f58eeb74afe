"""The random kills of ``killdrill chaos``: which schedule run *i* of a seed is, and one random case.

Below the job (:mod:`killdrill.chaos.job`), the worker processes (:mod:`killdrill.chaos.pool`) and
the shrinker (:mod:`killdrill.chaos.shrink`), which all run cases this way.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace

from killdrill.chaos.strategies import stratified_schedule
from killdrill.drill import Drill
from killdrill.points import Schedule, parse_schedule
from killdrill.records import (
    HARNESS_ERROR,
    POINT_NOT_REACHED,
    RESUME_FAILED,
    AttemptOutcome,
    CaseResult,
    Discovery,
    Violation,
)
from killdrill.verdict import judge
from killdrill.verdict.diagnosis import diagnose, regroup_summary

__all__ = ["chaos_case", "plan_schedule", "shard_indices"]


# ---- schedules ---------------------------------------------------------------------------
def plan_schedule(
    discovery: Discovery, seed: int, index: int, *, min_kills: int = 1, max_kills: int = 3
) -> Schedule:
    """Run ``index`` of ``seed``: a function of these and the catalogue's labels alone, whatever
    other runs did and whatever the clean run's timings were (see ``stratified_schedule``)."""
    return stratified_schedule(discovery, seed, index, min_kills=min_kills, max_kills=max_kills)


def shard_indices(shard: tuple[int, int], runs: int | None) -> Iterator[int]:
    """Shard K/N takes runs K-1, K-1+N, ...: disjoint, and the N shards cover every run."""
    k, n = shard
    i = k - 1
    while runs is None or i < runs:
        yield i
        i += n


# ---- one random case -----------------------------------------------------------------------
def chaos_case(drill: Drill, schedule: str | Schedule, *, seed: int | None = None) -> CaseResult:
    """Run one random case and judge it the chaos way: a kill that never landed is a miss.

    ``Drill.run_case`` rightly fails a named point that is not reached; a random offset past
    the end of a run is only a miss, and the run it left is judged like any completed run.
    An attempt that exits non-zero before its kill landed crashed on its own: resume_failed.
    """
    case = drill.run_case(schedule, seed=seed, check=False)
    sched = parse_schedule(case.schedule)
    missed = [
        v
        for v in case.violations
        if v.kind == POINT_NOT_REACHED and not _is_named(sched, int(v.detail.get("attempt", 0)))
    ]
    if not missed:
        return case
    violations = [v for v in case.violations if v not in missed]
    notes = list(case.notes)
    for v in missed:
        a = case.attempts[int(v.detail["attempt"]) - 1]
        if a.outcome == AttemptOutcome.POINT_NOT_REACHED and a.returncode == 0:
            notes.append(f"kill missed: attempt {a.number} exited 0 before {a.kill} could land")
        else:
            violations.append(
                Violation(
                    RESUME_FAILED,
                    f"attempt {a.number} exited {a.returncode} on its own before its kill {a.kill} landed",
                    detail={"attempt": a.number, "returncode": a.returncode},
                )
            )
    if case.ledger is not None and not any(v.kind == HARNESS_ERROR for v in violations):
        discovery = drill.discover()
        violations.extend(
            judge(
                drill.baseline_for(case.schedule),
                case.ledger,
                case.attempts,
                identity=drill.options.identity,
                volatile=discovery.volatile,
                checks=drill.options.checks,
            )
        )
    violations = diagnose(violations, baseline=drill.baseline_for(case.schedule), attempts=case.attempts)
    result = replace(
        case,
        violations=tuple(violations),
        notes=tuple(notes),
        summary=regroup_summary(case.summary, violations),
    )
    if result.ok and not drill.options.keep:
        shutil.rmtree(result.workdir, ignore_errors=True)
    return result


def _is_named(sched: Schedule, attempt: int) -> bool:
    kill = sched.for_attempt(attempt)
    return kill is not None and kill.is_named
