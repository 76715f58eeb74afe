"""How a launch treats its points is the strongest say of the case's nemeses: one way when none
acts at them, the kill gate for a kill at a point, plain waiting when a nemesis answers late (a
hold, a barrier, a pause, a deployment), whatever else is armed beside it."""

from __future__ import annotations

import pytest

from killdrill.faults.connection import ConnectionFault
from killdrill.faults.hold import Hold
from killdrill.faults.kill import Kill
from killdrill.faults.kinds import Scene
from killdrill.faults.pause import Pause
from killdrill.faults.resumers import Barrier
from killdrill.points import parse_fault
from killdrill.process.attempts import LaunchSpec
from killdrill.process.nemesis import AtPoints, Nemesis
from killdrill.process.supervisor import Supervisor


def _spec(fault: str | None = None) -> LaunchSpec:
    return LaunchSpec(
        argv=["agent"], env={}, cwd=None, stdout_path="", stderr_path="", number=1,
        kill=parse_fault(fault) if fault else None, timeout_s=10,
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
    assert spec.kill is not None
    assert _said(spec, Kill(spec.kill, spec)) is expected


def test_a_launch_nobody_acts_on_sends_its_points_one_way() -> None:
    spec, other = _spec(), _spec("before:x")
    assert other.kill is not None
    assert _said(spec) is AtPoints.ONE_WAY
    assert _said(spec, Kill(other.kill, other)) is AtPoints.ONE_WAY  # armed for another launch


def test_a_hold_and_a_connection_fault_keep_their_launchs_timing() -> None:
    hold, drop = _spec("before:x~1s"), _spec("drop:payments.charge")
    assert hold.kill is not None and drop.kill is not None
    assert _said(hold, Hold(hold.kill, hold)) is AtPoints.WAIT
    assert _said(drop, ConnectionFault(drop.kill, drop, Scene())) is AtPoints.GATE


def test_a_nemesis_that_answers_late_overrides_a_kills_gate() -> None:
    first, resumer = _spec("pause:before:x"), _spec("before:y")
    assert first.kill is not None and resumer.kill is not None
    kill = Kill(resumer.kill, resumer)
    assert _said(resumer, Barrier(), kill) is AtPoints.WAIT
    assert _said(resumer, Pause(first.kill, resumer), kill) is AtPoints.WAIT
    assert _said(_spec("offset:5ms"), Barrier()) is AtPoints.WAIT
