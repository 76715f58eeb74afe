"""The lockstep barrier of concurrent resumers, driven by hand: who is held, who goes, and when.

A stand-in supervisor records the answers and the timers the barrier asks for, so each rule
(all live resumers meet, an exited one is not waited for, a scheduled kill goes first, one
point only, patience) is checked without processes; tests/acceptance/test_concurrent_resume.py
races real resumers through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from killdrill.faults.resumers import Barrier
from killdrill.points import parse_fault
from killdrill.process.control import Connection
from killdrill.process.supervisor import LaunchSpec, Running
from killdrill.records import TraceEvent


@dataclass
class RecordingSupervisor:
    """What Barrier uses of a Supervisor: ``running``, ``at`` and ``release``."""

    running: list[Running] = field(default_factory=list)
    released: list[tuple[int, str]] = field(default_factory=list)  # (attempt number, point)
    timers: list[tuple[float, Callable[[], None]]] = field(default_factory=list)

    def at(self, delay_s: float, action: Callable[[], None]) -> None:
        self.timers.append((delay_s, action))

    def release(self, run: Running, conn: Connection) -> None:
        assert conn.waiting is not None
        self.released.append((run.spec.number, conn.waiting))
        conn.waiting = None


def _run(number: int, kill: str | None = None) -> Running:
    spec = LaunchSpec(
        argv=["agent"],
        env={},
        cwd=None,
        stdout_path="",
        stderr_path="",
        number=number,
        fault=parse_fault(kill) if kill else None,
        timeout_s=10,
    )
    started = time.monotonic()
    return Running(spec=spec, listener=None, popen=None, started=started, stdout=None, stderr=None)  # type: ignore[arg-type]


def _arrive(barrier: Barrier, run: Running, point: str, occurrence: int = 1) -> tuple[bool, Connection]:
    conn = Connection(sock=None, peer_pid=0, waiting=point)  # type: ignore[arg-type]
    return barrier.on_boundary(run, TraceEvent(point, occurrence, 1.0, 0), conn), conn


def _setup(n: int, **kw: Any) -> tuple[Barrier, RecordingSupervisor, list[Running]]:
    runs = [_run(i + 2) for i in range(n)]
    sup = RecordingSupervisor(running=runs)
    barrier = Barrier(**kw)
    barrier.setup(sup)  # type: ignore[arg-type]
    return barrier, sup, runs


def test_resumers_are_held_until_every_live_one_reaches_the_point() -> None:
    barrier, sup, (a, b, c) = _setup(3)
    assert _arrive(barrier, a, "before:claim")[0]
    assert _arrive(barrier, b, "before:claim")[0]
    assert sup.released == []  # c has not come yet
    assert _arrive(barrier, c, "before:claim")[0]
    assert sorted(sup.released) == [(2, "before:claim"), (3, "before:claim"), (4, "before:claim")]
    assert barrier.released == 1 and barrier.waiting == {}


def test_each_point_is_its_own_barrier() -> None:
    barrier, sup, (a, b) = _setup(2)
    _arrive(barrier, a, "before:claim")
    _arrive(barrier, b, "after:claim")  # not the same point: nobody goes
    assert sup.released == []
    _arrive(barrier, b, "before:claim", occurrence=1)
    assert sorted(sup.released) == [(2, "before:claim"), (3, "before:claim")]
    assert "after:claim" in barrier.waiting


def test_a_resumer_that_exited_is_not_waited_for() -> None:
    barrier, sup, (a, b) = _setup(2)
    _arrive(barrier, a, "before:insert")
    assert sup.released == []
    b.returncode = 0  # b finished without reaching the point
    barrier.on_exit(b)
    assert sup.released == [(2, "before:insert")]


def test_a_resumer_already_judged_is_not_waited_for() -> None:
    barrier, sup, (a, b) = _setup(2)
    b.outcome = "killed"  # being killed: still alive for a moment, but it will not come
    _arrive(barrier, a, "before:insert")
    assert sup.released == [(2, "before:insert")]


def test_the_scheduled_kill_of_a_resumer_takes_precedence() -> None:
    barrier, sup, (a, b) = _setup(2)
    a.spec.fault = parse_fault("before:insert")
    taken, _ = _arrive(barrier, a, "before:insert")
    assert not taken  # the supervisor's kill decision sees this boundary, not the barrier
    assert _arrive(barrier, b, "before:insert")[0]
    assert sup.released == []  # a has not arrived at the barrier: b waits
    a.fired, a.outcome = True, "killed"  # the supervisor kills a there
    barrier.on_exit(a)
    assert sup.released == [(3, "before:insert")]


def test_a_kill_that_already_fired_leaves_the_point_to_the_barrier() -> None:
    barrier, _, (a, _b) = _setup(2)
    a.spec.fault = parse_fault("before:insert")
    a.fired = True
    assert _arrive(barrier, a, "before:insert")[0]
    b = _setup(1)[2][0]
    b.spec.fault = parse_fault("before:insert")
    assert _arrive(barrier, b, "before:insert", occurrence=2)[0]  # not the kill's occurrence


def test_point_limits_the_barrier_to_one_point() -> None:
    barrier, sup, (a, b) = _setup(2, point="before:insert")
    assert not _arrive(barrier, a, "before:claim")[0]
    assert not _arrive(barrier, b, "before:claim")[0]
    assert _arrive(barrier, a, "before:insert")[0]
    assert sup.released == []
    assert _arrive(barrier, b, "before:insert")[0]
    assert len(sup.released) == 2


def test_a_barrier_not_everyone_reaches_is_released_after_patience_with_a_note() -> None:
    barrier, sup, (a, b) = _setup(2, patience_s=0.25)
    _arrive(barrier, a, "before:claim")
    _arrive(barrier, a, "after:claim")  # two open barriers, one timer each
    assert [d for d, _ in sup.timers] == [0.25, 0.25]
    sup.timers[0][1]()  # patience is over for before:claim
    assert sup.released == [(2, "before:claim")]
    assert a.notes == ["barrier at before:claim released after 0.25s: not every resumer came"]
    assert b.notes == []
    _arrive(barrier, b, "after:claim")
    assert sorted(sup.released[1:]) == [(2, "after:claim"), (3, "after:claim")]
    sup.timers[1][1]()  # released already: the late timer does nothing
    assert len(sup.released) == 3 and len(a.notes) == 1 and barrier.released == 2


def test_patience_is_at_least_what_the_first_took_to_arrive() -> None:
    """Resumers start together; one that took 3 s to reach the point (a loaded machine, a
    framework imported at spawn) is given as long again for the other, not the 1 s default,
    whose expiry let it finish before the other looked: the race missed."""
    barrier, sup, (a, b) = _setup(2)
    a.started = b.started = time.monotonic() - 3.0
    _arrive(barrier, a, "before:claim")
    ((delay, give_up),) = sup.timers
    assert 3.0 <= delay < 4.0
    give_up()
    assert a.notes == [f"barrier at before:claim released after {delay:.3g}s: not every resumer came"]
    # counted from that release now: held at every later boundary by b (blocked on a lock, say),
    # a waits 1 s at each, not as long as it has run (which would double at every boundary)
    _arrive(barrier, a, "after:claim")
    assert sup.timers[-1][0] == 1.0
