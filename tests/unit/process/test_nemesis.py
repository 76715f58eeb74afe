"""How a launch treats its points is the strongest say of the case's nemeses: one way when none
acts at them, the kill gate for a kill at a point, plain waiting when a nemesis answers late (a
hold, a barrier, a pause, a deployment), whatever else is armed beside it.  Whether a launch's
fault landed is theirs to say too: one that never acted missed, and a kill missed unless its
launch died of it."""

from __future__ import annotations

import pytest

from killdrill.faults.connection import ConnectionFault
from killdrill.faults.hold import Hold
from killdrill.faults.kill import Kill
from killdrill.faults.kinds import Scene
from killdrill.faults.pause import Pause
from killdrill.faults.resumers import Barrier
from killdrill.points import parse_fault
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.nemesis import AtPoints, Missed, Nemesis
from killdrill.process.supervisor import Supervisor
from killdrill.records import TraceEvent


def _spec(fault: str | None = None) -> LaunchSpec:
    return LaunchSpec(
        argv=["agent"], env={}, cwd=None, stdout_path="", stderr_path="", number=1,
        fault=parse_fault(fault) if fault else None, timeout_s=10,
    )  # fmt: skip


def _said(spec: LaunchSpec, *faults: Nemesis) -> AtPoints:
    return Supervisor(faults=faults).at_points(spec)


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("before:x", AtPoints.GATE),
        ("before:x+3ms", AtPoints.GATE),
        ("offset:20ms", AtPoints.ONE_WAY),
        ("start+12%", AtPoints.ONE_WAY),
    ],
)
def test_a_kill_gates_at_a_point_and_waits_nowhere_at_a_time(fault: str, expected: AtPoints) -> None:
    spec = _spec(fault)
    assert spec.fault is not None
    assert _said(spec, Kill(spec.fault, spec)) is expected


def test_a_launch_nobody_acts_on_sends_its_points_one_way() -> None:
    spec, other = _spec(), _spec("before:x")
    assert other.fault is not None
    assert _said(spec) is AtPoints.ONE_WAY
    assert _said(spec, Kill(other.fault, other)) is AtPoints.ONE_WAY  # armed for another launch


def test_a_hold_and_a_connection_fault_keep_their_launchs_timing() -> None:
    hold, drop = _spec("before:x~1s"), _spec("drop:payments.charge")
    assert hold.fault is not None and drop.fault is not None
    assert _said(hold, Hold(hold.fault, hold)) is AtPoints.WAIT
    assert _said(drop, ConnectionFault(drop.fault, drop, Scene())) is AtPoints.GATE


def test_a_nemesis_that_answers_late_overrides_a_kills_gate() -> None:
    first, resumer = _spec("pause:before:x"), _spec("before:y")
    assert first.fault is not None and resumer.fault is not None
    kill = Kill(resumer.fault, resumer)
    assert _said(resumer, Barrier(), kill) is AtPoints.WAIT
    assert _said(resumer, Pause(first.fault, resumer), kill) is AtPoints.WAIT
    assert _said(_spec("offset:5ms"), Barrier()) is AtPoints.WAIT


def _ended(
    spec: LaunchSpec, *, fired: bool, killed_at: str | None = None, signal: str | None = None
) -> Running:
    """``spec``'s launch as the supervisor leaves it once it ended by itself."""
    run = Running(spec=spec, listener=None, popen=None, started=0.0, stdout=None, stderr=None)  # type: ignore[arg-type]
    run.fired, run.killed_at, run.sent_signal, run.returncode = fired, killed_at, signal, 0
    return run


def test_a_fault_that_never_acted_missed_whichever_nemesis_is_asked() -> None:
    hold, free, other = _spec("before:x~1s"), _spec(), _spec("before:y")
    assert hold.fault is not None and other.fault is not None
    for nemesis in (Hold(hold.fault, hold), Barrier(), Kill(other.fault, other)):
        assert nemesis.missed(_ended(hold, fired=False)) == Missed()
        assert nemesis.missed(_ended(hold, fired=True)) is None  # held there: it landed
        assert nemesis.missed(_ended(free, fired=False)) is None  # nothing was aimed at it


def test_a_kill_misses_unless_its_launch_died_of_it() -> None:
    at, later = _spec("before:x"), _spec("before:x+3ms")
    assert at.fault is not None and later.fault is not None
    kill = Kill(later.fault, later)
    assert kill.missed(_ended(later, fired=True, killed_at="before:x+3ms")) is None
    assert kill.missed(_ended(later, fired=True)) == Missed("exited within 3ms of before:x: the kill missed")
    # a signal that raced the launch's own exit: the supervisor notes it, the kill adds nothing
    assert kill.missed(_ended(later, fired=True, signal="SIGKILL")) == Missed()
    assert Kill(at.fault, at).missed(_ended(at, fired=True)) == Missed()


def test_a_point_sent_one_way_is_armed_only_where_the_launchs_fault_is_yet_to_act() -> None:
    spec = _spec("before:x#2")
    assert spec.fault is not None
    kill = Kill(spec.fault, spec)
    assert kill.armed_at(_ended(spec, fired=False), TraceEvent("before:x", 2, 1.0, 0))
    assert not kill.armed_at(_ended(spec, fired=False), TraceEvent("before:x", 1, 1.0, 0))
    assert not kill.armed_at(_ended(spec, fired=True), TraceEvent("before:x", 2, 1.0, 0))
    assert not Barrier().armed_at(_ended(_spec(), fired=False), TraceEvent("before:x", 2, 1.0, 0))
