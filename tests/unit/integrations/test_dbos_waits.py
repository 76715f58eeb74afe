"""DBOS's waits, read from a case's attempts beside a clean run (the record's ``waits`` hook)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from killdrill.integrations.dbos import waits
from killdrill.records import Attempt, TraceEvent


def run(number: int, points: list[tuple[str, float]], duration_ms: float, killed: bool = False) -> Attempt:
    trace = tuple(TraceEvent(p, 1, t, 1) for p, t in points)
    return Attempt(
        number, points[-1][0] if killed else None, "killed" if killed else "exited", -9 if killed else 0,
        duration_ms, trace, killed_at=points[-1][0] if killed else None, signal="SIGKILL" if killed else None,
    )  # fmt: skip


CLEAN = run(0, [("before:payout", 500.0), ("committed:payout", 800.0)], 1400.0)


def test_a_recovered_workflow_late_to_start_and_to_end_is_said_with_what_is_removed() -> None:
    killed = run(1, [("before:payout", 500.0), ("before:charge", 550.0)], 560.0, killed=True)
    resumed = run(2, [("before:payout", 1400.0), ("committed:payout", 1500.0)], 2900.0)
    recovery, result = waits([(10.0, killed), (20.0, resumed)], CLEAN)
    assert "recovery of workflow payout" in recovery["label"]
    assert (recovery["from"], recovery["to"]) == pytest.approx((20.5, 21.4))  # 0.9 s later than clean
    assert "result of recovered workflow payout" in result["label"]
    assert result["setting"] == "polling_interval_sec"
    assert result["to"] - result["from"] == pytest.approx(0.8)  # a 1.4 s tail where a clean run's is 0.6 s
    for w in (recovery, result):  # what cannot be shortened, and what the integration already removed
        assert w["kept"] and any("first poll" in r for r in w["removed"]), w


def test_a_resume_as_quick_as_a_clean_run_waited_on_nothing() -> None:
    killed = run(1, [("before:payout", 500.0), ("before:charge", 550.0)], 560.0, killed=True)
    resumed = run(2, [("before:payout", 450.0), ("committed:payout", 700.0)], 1250.0)
    assert waits([(10.0, killed), (20.0, resumed)], CLEAN) == []
    assert waits([(10.0, resumed)], CLEAN) == []  # no kill, nothing held


def test_a_deployments_launches_are_not_read_against_a_single_commands_clean_run() -> None:
    killed = run(2, [("before:payout", 500.0), ("before:charge", 550.0)], 560.0, killed=True)
    resumed = run(3, [("before:payout", 1400.0), ("committed:payout", 1500.0)], 2900.0)
    named = [(10.0, replace(killed, process="app")), (20.0, replace(resumed, process="app"))]
    assert waits(named, CLEAN) == []
