"""Concurrent resume in lockstep: two resumers of one thread, every boundary a barrier.

The read-then-insert claim must be caught nearly every time (the barrier holds both
resumers inside its window), the atomic claim never, on SQLite and on PostgreSQL.
4 runs each per push, 20 under ``-m slow``; forked attempts keep that affordable.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
RUNS = 4
SLOW_RUNS = 20


def claimer(store: str, racy: bool) -> list[str]:
    cmd = [
        sys.executable,
        str(AGENTS / "claimer.py"),
        "--thread",
        "{thread}",
        "--ckpt",
        "{workdir}/ckpt.json",
    ]
    return [*cmd, "--store", store, *(["--racy"] if racy else [])]


def caught_in(tmp_path: Path, store: str, racy: bool, runs: int = RUNS) -> tuple[int, list[str]]:
    options = DrillOptions(root=tmp_path, resumers=2, launcher="fork", workers=2, discovery_runs=1)
    with Drill(claimer(store, racy), options) as drill:
        result = drill.run_all(["before:notify"] * runs)
    kinds = [",".join(c.kinds) for c in result.cases]
    for case in result.cases:
        assert len(case.attempts) >= 3  # the killed attempt, then two resumers at once
        assert {a.number for a in case.attempts[1:3]} == {2}
    return sum(1 for c in result.cases if "duplicate_effect" in c.kinds), kinds


def test_read_then_insert_claim_is_caught_in_lockstep(tmp_path: Path, store_url: str) -> None:
    caught, kinds = caught_in(tmp_path, store_url, racy=True)
    print(f"racy claim caught in {caught}/{RUNS} runs")
    assert caught >= RUNS - 1, kinds


def test_atomic_claim_passes_every_run(tmp_path: Path, store_url: str) -> None:
    _, kinds = caught_in(tmp_path, store_url, racy=False)
    assert kinds == [""] * RUNS


def test_resumers_that_start_slowly_still_meet_at_the_barrier(tmp_path: Path) -> None:
    """Both resumers take seconds to reach their first boundary, 1.5 s apart (a loaded machine, a
    framework imported at spawn).  The barrier waits as long as the first took to get there, so
    they meet and the racy claim is caught; with a fixed 1 s it let the first send alone, the
    second replayed, and the race the drill exists for was missed."""
    store = f"sqlite:///{tmp_path / 'effects.sqlite'}"
    options = DrillOptions(root=tmp_path / "r", resumers=2, launcher="fork", discovery_runs=1)
    with Drill([*claimer(store, racy=True), "--stagger", "2.5,4"], options) as drill:
        case = drill.run_case("before:notify")
    gave_up = [n for a in case.attempts for n in a.notes if "released after" in n]
    assert gave_up == [] and [a.number for a in case.attempts] == [1, 2, 2], case.text()
    assert "duplicate_effect" in case.kinds, case.text()


@pytest.mark.slow
def test_lockstep_verdicts_hold_over_20_runs(tmp_path: Path, store_url: str) -> None:
    caught, kinds = caught_in(tmp_path / "racy", store_url, racy=True, runs=SLOW_RUNS)
    assert caught >= SLOW_RUNS - 1, kinds
    _, kinds = caught_in(tmp_path / "atomic", store_url, racy=False, runs=SLOW_RUNS)
    assert kinds == [""] * SLOW_RUNS
