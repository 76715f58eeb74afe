"""The random kills of ``killdrill chaos``: which schedule run *i* of a seed is, and one random case.

Below the job (:mod:`killdrill.chaos.job`), the worker processes (:mod:`killdrill.chaos.pool`) and
the shrinker (:mod:`killdrill.chaos.shrink`), which all run cases this way.
"""

from __future__ import annotations

from collections.abc import Iterator

from killdrill.chaos.strategies import stratified_schedule
from killdrill.drill import Drill
from killdrill.points import Schedule
from killdrill.records import CaseResult, Discovery

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
    """Run one random case, judged once, the chaos way: a kill that never landed is a miss.

    ``Drill.run_case`` rightly fails a named point that is not reached; a random offset past
    the end of a run is only a miss, and the run it left is judged like any completed run.
    An attempt that exits non-zero before its kill landed crashed on its own: resume_failed.
    """
    return drill.run_case(schedule, seed=seed, check=False, offsets_may_miss=True)
