"""A case's phases: consecutive spans, split at each launch into the harness's part and the attempt's."""

from __future__ import annotations

import time

import pytest

from killdrill.drill.phases import PhaseClock, clip_waits
from killdrill.records import Attempt, TraceEvent


def attempt(number: int, duration_ms: float, points: list[float], killed: bool) -> Attempt:
    trace = tuple(TraceEvent(f"p{i}", 1, t, 1) for i, t in enumerate(points))
    return Attempt(
        number=number,
        kill="p1" if killed else None,
        outcome="killed" if killed else "exited",
        returncode=-9 if killed else 0,
        duration_ms=duration_ms,
        trace=trace,
        killed_at="p1" if killed else None,
        signal="SIGKILL" if killed else None,
    )


def test_a_launch_splits_into_launch_readiness_run_to_kill_and_teardown() -> None:
    clock = PhaseClock()
    time.sleep(0.3)
    clock.launched([attempt(1, 200.0, [50.0, 150.0], killed=True)])
    phases = clock.phases
    assert phases["readiness"] == pytest.approx(0.05)
    assert phases["run to kill"] == pytest.approx(0.10)
    assert phases["teardown"] == pytest.approx(0.05)
    assert phases["launch"] == pytest.approx(sum(phases.values()) - 0.2)
    assert sum(phases.values()) == pytest.approx(clock.wall(), abs=0.01)
    assert len(clock.kills) == 1 and len(clock.timeline) == 1


def test_a_resume_is_readiness_then_resume_and_the_result_sums_to_the_wall_time() -> None:
    clock = PhaseClock()
    clock.mark("setup")
    time.sleep(0.2)
    clock.launched([attempt(2, 150.0, [100.0], killed=False)])
    time.sleep(0.05)
    phases = clock.result()
    assert phases["readiness"] == pytest.approx(0.1) and phases["resume"] == pytest.approx(0.05)
    assert phases["release"] >= 0.05
    assert sum(phases.values()) == pytest.approx(clock.wall(), abs=0.01)
    assert not clock.kills


def test_a_wait_counts_from_the_first_kill_to_when_the_runtime_handed_the_work_on() -> None:
    waits = [{"label": "x", "from": None, "to": 105.0}, {"label": "y", "from": 90.0, "to": 95.0}]
    assert clip_waits(waits, [100.0], 200.0) == [{"label": "x", "seconds": 5.0}]
    assert clip_waits(waits, [], 200.0) == []


def test_a_deployments_launches_are_a_timeline_per_process_with_their_kills() -> None:
    from dataclasses import replace

    clock = PhaseClock()
    now = time.monotonic()
    driver = replace(attempt(1, 900.0, [], killed=False), process="driver")
    first = replace(attempt(2, 400.0, [100.0, 300.0], killed=True), process="app")
    again = replace(attempt(3, 800.0, [200.0], killed=False), process="app")
    clock.deployed([driver, again, first], {1: now - 0.8, 2: now - 1.0, 3: now - 0.5})
    order = [a.number for _, a in clock.timeline]
    assert order in ([1, 2, 3], [2, 3, 1])  # the killed app launch right before its restart
    shift = time.time() - time.monotonic()
    assert clock.kills == [pytest.approx(now - 1.0 + 0.4 + shift, abs=0.01)]  # its start + its life
    assert dict((a.number, t) for t, a in clock.timeline)[3] == pytest.approx(now - 0.5 + shift, abs=0.01)
