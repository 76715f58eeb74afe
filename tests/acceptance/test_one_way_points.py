"""Points the supervisor will not act on go one way; the kill still lands exactly.

An attempt the supervisor acts on at no point (a clean run, a resume, a timed kill) gets
``KILLDRILL_WAIT_AT=[]``: the agent waits for an answer only on a connection's first message and
sends every other point one way.  An attempt armed at a point waits everywhere, as before.  These
drills check, on real processes and real ledgers, that nothing of the trace or the kill's place
is lost by it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.ledger import Ledger
from killdrill.process import supervisor
from killdrill.process.control import Connection, ControlListener
from killdrill.records import DRAINED, HARNESS_ERROR, KILLED, Call, CaseResult

AGENT = Path(__file__).parents[1] / "agents" / "basic" / "many_points.py"
STEPS = 150


def command(*extra: str) -> list[str]:
    return [sys.executable, str(AGENT), "--thread", "{thread}", "--ckpt", "{workdir}/ckpt.json", *extra]


@pytest.fixture(params=["spawn", "fork"])
def opts(request: pytest.FixtureRequest, tmp_path: Path) -> DrillOptions:
    return DrillOptions(root=tmp_path / "runs", timeout=30, launcher=request.param, keep=True)


def label(point: str, i: int) -> str:
    return point if i == 1 else f"{point}#{i}"


def test_a_clean_run_traces_every_point_in_order_at_its_own_time(opts: DrillOptions) -> None:
    burst = 5000  # a tight loop of points just before the exit: every one traced
    with Drill(command("--steps", str(STEPS), "--burst", str(burst)), opts) as drill:
        discovery = drill.discover()
    expected = []
    for i in range(1, STEPS + 1):
        expected += [label("before:step", i), label("during:payments.charge", i), label("after:step", i)]
    expected += [label("after:burst", i) for i in range(1, burst + 1)]
    assert [e.label for e in discovery.catalogue] == expected
    times = [e.t_ms for e in discovery.catalogue]
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= discovery.duration_ms


@pytest.fixture
def slow_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor slower than the agent: 64 bytes a read, 0.2 ms apart, so it sees an
    attempt's exit before the last points the attempt sent."""
    recv = ControlListener._recv

    def slow(self: ControlListener, conn: Connection) -> bytes | None:
        time.sleep(0.0002)
        try:
            data = conn.sock.recv(64)
        except (BlockingIOError, InterruptedError):
            return None
        if not data:
            return recv(self, conn)  # EOF: as the listener does
        return data

    monkeypatch.setattr(ControlListener, "_recv", slow)


@pytest.mark.usefixtures("slow_reader")
def test_what_the_exit_leaves_unread_is_still_traced(opts: DrillOptions) -> None:
    """The last points of a clean run are read from the connection after its exit, not lost."""
    with Drill(command("--steps", "3", "--burst", "3000"), opts) as drill:
        labels = drill.discover().labels()
    assert labels[-1] == "after:burst#3000" and len(labels) == 9 + 3000


@pytest.mark.usefixtures("slow_reader")
def test_what_a_drained_attempt_passed_after_sigterm_is_traced(opts: DrillOptions) -> None:
    """SIGTERM at the kill point, the agent finishes its step and exits 75: the points it passed
    on the way, one way, are in its trace, those read after its exit too."""
    drainer = Path(__file__).parents[1] / "agents" / "basic" / "drainer.py"
    argv = [sys.executable, str(drainer), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]
    with Drill([*argv, "--burst", "3000"], replace(opts, signal="TERM", grace=10)) as drill:
        case = drill.run_case("before:b")
    assert case.ok, case.text()
    first = case.attempts[0]
    assert first.outcome == DRAINED and first.returncode == 75
    labels = [e.label for e in first.trace]
    assert labels[3:6] == ["before:b", "during:tickets.create#2", "after:b"]
    assert labels[-1] == "after:burst#3000" and len(labels) == 6 + 3000


def _ledger_calls(case: CaseResult) -> tuple[Call, ...]:
    """The case's ledger as its file holds it, not as the harness read it."""
    ledger = Ledger.in_workdir(case.workdir, case.thread)
    try:
        return ledger.snapshot().calls
    finally:
        ledger.close()


@pytest.mark.parametrize("kill", ["during:payments.charge#97", "after:step#60", "before:step#150"])
def test_an_attempt_armed_at_a_point_waits_everywhere_and_its_resume_goes_one_way(
    opts: DrillOptions, kill: str
) -> None:
    with Drill(command("--steps", str(STEPS)), opts) as drill:
        case = drill.run_case(kill)
    assert case.ok, case.text()
    first = case.attempts[0]
    assert "wait-at: None" in first.stdout_tail  # armed at a point: every point waits, as before
    assert "wait-at: []" in case.attempts[-1].stdout_tail  # the resume: nothing to act on
    point, _, n = kill.partition("#")
    assert first.outcome == KILLED and first.killed_at == kill
    assert first.trace[-1].label == kill  # every point before it was read, none after it ran
    charges_before = int(n) - (1 if point == "before:step" else 0)
    assert sum(e.point == "during:payments.charge" for e in first.trace) == charges_before
    calls = _ledger_calls(case)
    assert sum(c.attempt == 1 for c in calls) == charges_before  # the ledger agrees with the trace
    assert sorted({c.key for c in calls}) == sorted(f"{case.thread}:{i}" for i in range(STEPS))


@pytest.mark.usefixtures("slow_reader")
def test_a_timed_kill_of_a_one_way_attempt_traces_what_it_had_sent(opts: DrillOptions) -> None:
    """A kill at an offset acts on no point: every point goes one way.  The points the agent had
    sent when it died are read after the kill (the reader here lags far behind), so the trace
    ends where the agent was: one charge short of the ledger at most (a charge is recorded,
    then its point is sent).  The kill is at half a clean run's time, not a fixed offset: spawned,
    the first charge comes ~70 ms in on a quiet machine, past 150 ms on a loaded one."""
    with Drill(command("--steps", "2000"), opts) as drill:
        offset = f"offset:{int(drill.discover().duration_ms / 2)}ms"
        case = drill.run_case(offset, check=False)
    first = case.attempts[0]
    assert "wait-at: []" in first.stdout_tail
    assert first.outcome == KILLED and first.killed_at == offset, case.text()
    assert case.ok, case.text()
    charged = sum(c.attempt == 1 for c in _ledger_calls(case))
    traced = sum(e.point == "during:payments.charge" for e in first.trace)
    assert 0 < charged < 2000 and traced in (charged, charged - 1), (charged, traced)


def test_an_agent_that_does_not_wait_at_its_kill_point_is_a_harness_error_not_a_pass(
    opts: DrillOptions,
) -> None:
    with Drill(command("--steps", "20", "--claim-no-wait"), opts) as drill:
        case = drill.run_case("before:step#5")
    assert not case.ok
    assert case.kinds == (HARNESS_ERROR,)
    assert "did not wait at before:step#5" in case.text()


def test_a_flood_of_one_way_points_is_capped_not_held_in_memory(
    opts: DrillOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One-way points cost the agent no wait, so a loop around ``boundary()`` sends them as fast
    as it can: past ``MAX_POINTS`` (here 5,000, of 20,000 sent) the attempt is a protocol error."""
    monkeypatch.setattr(supervisor, "MAX_POINTS", 5000)
    abuser = Path(__file__).parents[1] / "agents" / "hostile" / "abuser.py"
    with Drill([sys.executable, str(abuser), "oneway", "{thread}"], opts) as drill:
        case = drill.run_case("before:abuse")  # the resumed attempt abuses
    assert case.kinds == (HARNESS_ERROR,), case.text()
    assert "more than 5,000 points in one attempt" in case.text()
    assert len(case.attempts[1].trace) == 5000
