"""The kill-and-resume loop on real processes: kills land where scheduled, trees die, hangs end.

Nothing is mocked: every test launches real subprocesses, SIGKILLs them and reads the ledger.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from killdrill.drill import DiscoveryError, Drill, DrillOptions, UnknownPointError
from killdrill.records import (
    EXITED,
    HANG,
    HARNESS_ERROR,
    KILLED,
    POINT_NOT_REACHED,
    RESUME_FAILED,
)

if TYPE_CHECKING:
    from tests.conftest import SharedDiscoveries

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
PY = sys.executable


def steps(*extra: str) -> list[str]:
    return [PY, str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/ckpt.json", *extra]


def no_children_left(wait_s: float = 3.0) -> list[psutil.Process]:
    """Agent processes (anything running a script of tests/agents) still alive under this test process.

    Only agents count: under xdist the worker also holds other tests' long-lived helpers.
    A loaded machine reaps slowly, so allow ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for p in psutil.Process().children(recursive=True):
            try:
                if p.status() != psutil.STATUS_ZOMBIE and any(str(AGENTS) in a for a in p.cmdline()):
                    alive.append(p)
            except psutil.Error:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.fixture
def opts(tmp_path: Path) -> DrillOptions:
    return DrillOptions(root=tmp_path / "runs", timeout=20)


def test_catalogue_lists_every_boundary_in_order(
    opts: DrillOptions, shared_discovery: SharedDiscoveries
) -> None:
    labels = shared_discovery(Drill(steps(), opts)).points()
    assert labels == [
        "before:decide",
        "after:decide",
        "before:charge",
        "during:payments.charge",
        "after:charge",
        "before:record",
        "during:kv.set",
        "after:record",
    ]


def test_every_point_of_a_correct_agent_passes(
    opts: DrillOptions, shared_discovery: SharedDiscoveries
) -> None:
    # forked attempts (the spawned path: every other drill of this file); the loop is the same
    with shared_discovery(Drill(steps(), replace(opts, launcher="fork"))) as drill:
        result = drill.run_all()
    assert result.ok, result.text()
    assert len(result.cases) == 8
    for case in result.cases:
        first = case.attempts[0]
        assert first.outcome == KILLED and first.returncode == -signal.SIGKILL
        assert first.killed_at == case.schedule  # the kill landed exactly there
        assert first.trace[-1].label == case.schedule  # and nothing ran past it
        assert case.attempts[-1].returncode == 0
    assert not no_children_left()


def test_keyless_charge_is_caught_exactly_where_it_must_be(
    opts: DrillOptions, shared_discovery: SharedDiscoveries
) -> None:
    with shared_discovery(Drill(steps("--bug", "nokey"), replace(opts, launcher="fork"))) as drill:
        result = drill.run_all()
    failing = {c.schedule: c.kinds for c in result.cases if not c.ok}
    # Killed after the charge landed and before the checkpoint: the resume charges again.
    assert failing == {
        "during:payments.charge": ("duplicate_effect",),
        "after:charge": ("duplicate_effect",),
    }
    text = next(c for c in result.cases if c.schedule == "during:payments.charge").text()
    assert "response lost" in text
    assert "killdrill run --schedule during:payments.charge" in text


def test_multi_kill_schedule_kills_each_attempt(
    opts: DrillOptions, shared_discovery: SharedDiscoveries
) -> None:
    case = shared_discovery(Drill(steps(), opts)).run_case("before:charge,during:kv.set")
    assert case.ok, case.text()
    assert [a.killed_at for a in case.attempts] == ["before:charge", "during:kv.set", None]
    # The resume re-entered at the step after the last checkpoint, not at the beginning.
    assert case.attempts[1].trace[0].label == "before:charge"
    assert not any("resumed_from_start" in n for n in case.notes)


def test_a_process_tree_leaves_no_survivor(tmp_path: Path, opts: DrillOptions) -> None:
    pids_file = tmp_path / "pids.txt"
    drill = Drill([PY, str(AGENTS / "tree.py"), str(pids_file)], opts)
    case = drill.run_case("before:work")
    assert case.ok, case.text()
    recorded = [int(p) for line in pids_file.read_text().split() for p in [line]]
    assert len(recorded) == 3 * 4  # 2 discovery runs + 2 attempts, 3 processes each
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in recorded):
        time.sleep(0.02)
    alive = [
        p for p in recorded if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []


def test_a_hanging_agent_is_a_hang_within_the_timeout(tmp_path: Path) -> None:
    drill = Drill([PY, str(AGENTS / "hang.py")], DrillOptions(root=tmp_path, timeout=1.5))
    drill.discover()
    start = time.monotonic()
    case = drill.run_case("before:work")
    elapsed = time.monotonic() - start
    assert case.kinds == (HANG,)
    assert "hung: no exit within 1.5s (last boundary: before:work)" in case.violations[0].message
    assert elapsed < 1.5 + 1.0 + 1.0  # attempt 1 is killed at once; attempt 2 hangs for the timeout
    assert not no_children_left()


def test_unknown_point_lists_the_catalogue(opts: DrillOptions, shared_discovery: SharedDiscoveries) -> None:
    with pytest.raises(UnknownPointError) as err:
        shared_discovery(Drill(steps(), opts)).run_case("before:chrage")
    assert "before:chrage" in str(err.value)
    assert "before:decide, after:decide, before:charge" in str(err.value)


def test_point_never_reached_is_a_violation_not_a_pass(opts: DrillOptions) -> None:
    case = Drill([PY, str(AGENTS / "branch.py")], opts).run_case("before:rare,before:rare")
    assert case.kinds == (POINT_NOT_REACHED,)
    assert "attempt 2 was scheduled to be killed at before:rare" in case.violations[0].message


def test_discovery_failure_carries_the_agents_stderr(opts: DrillOptions) -> None:
    with pytest.raises(DiscoveryError) as err:
        Drill([PY, str(AGENTS / "exits.py"), "1"], opts).discover()
    assert "exited 1" in str(err.value)
    assert "agent failed on purpose" in str(err.value)


def test_a_crashing_resume_is_resume_failed(tmp_path: Path) -> None:
    resume = [PY, str(AGENTS / "exits.py"), "3"]  # resumes crash
    opts = DrillOptions(root=tmp_path, max_attempts=2, resume_with=resume)
    drill = Drill([PY, str(AGENTS / "exits.py"), "0"], opts)
    case = drill.run_case("before:work")
    assert case.kinds == (RESUME_FAILED,)
    assert "exited 3" in case.violations[0].message


@pytest.mark.parametrize("mode", ["foreign", "garbage"])
def test_control_channel_abuse_is_reported_not_a_crash(mode: str, opts: DrillOptions) -> None:
    """Junk after a valid hello is the agent's own protocol error (harness_error); a peer without
    the token is a stranger, ignored and noted: it must not be able to fail the case."""
    drill = Drill([PY, str(AGENTS / "garbage.py"), mode], opts)
    if mode == "garbage":
        with pytest.raises(DiscoveryError):
            drill.discover()  # the abuse happens in the clean run too
    else:
        assert drill.points() == ["before:start", "after:start"]
    from killdrill.process.supervisor import LaunchSpec, Supervisor

    wd = opts.root
    os.makedirs(f"{wd}/x/.killdrill", exist_ok=True)
    spec = LaunchSpec(
        argv=[PY, str(AGENTS / "garbage.py"), mode],
        env=dict(os.environ),
        cwd=None,
        stdout_path=f"{wd}/x/o",
        stderr_path=f"{wd}/x/e",
        number=1,
        fault=None,
        timeout_s=10,
        control_dir=f"{wd}/x/.killdrill/ctl",
    )
    attempt = Supervisor().run(spec)
    assert attempt.outcome == (EXITED if mode == "foreign" else HARNESS_ERROR), attempt
    expected = "ignored 1 control connection(s)" if mode == "foreign" else "malformed control message"
    assert any(expected in n for n in attempt.notes), attempt.notes
    assert not no_children_left()


def test_a_forked_child_gets_its_own_connection(opts: DrillOptions) -> None:
    drill = Drill([PY, str(AGENTS / "forks.py")], opts)
    assert drill.points() == ["before:parent", "before:child", "after:parent"]
    case = drill.run_case("before:child")
    assert case.attempts[0].killed_at == "before:child"
    assert case.ok, case.text()


def test_plan_is_written_before_the_first_attempt_and_failing_workdirs_are_kept(
    opts: DrillOptions, shared_discovery: SharedDiscoveries
) -> None:
    case = shared_discovery(Drill(steps("--bug", "nokey"), opts)).run_case("after:charge")
    assert not case.ok
    plan = Path(case.workdir) / ".killdrill" / "plan.json"
    assert plan.exists() and "after:charge" in plan.read_text()
    passing = shared_discovery(Drill(steps(), opts)).run_case("after:charge")
    assert passing.ok and not Path(passing.workdir).exists()


def test_term_signal_drain_is_sigterm_then_sigkill_after_grace(
    tmp_path: Path, shared_discovery: SharedDiscoveries
) -> None:
    # steps.py installs no SIGTERM handler: the default action ends it, and it resumes cleanly.
    drill = shared_discovery(Drill(steps(), DrillOptions(root=tmp_path, signal="TERM", grace=2)))
    case = drill.run_case("before:charge")
    assert case.ok, case.text()
    assert case.attempts[0].signal == "SIGTERM"
    assert case.attempts[0].returncode == -signal.SIGTERM


def test_amount_recomputed_on_replay_is_an_unexpected_effect(opts: DrillOptions) -> None:
    drill = Drill([PY, str(AGENTS / "late_fee.py"), "--ckpt", "{workdir}/c.json"], opts)
    case = drill.run_case("after:charge")
    assert case.kinds == ("unexpected_effect",), case.text()
    assert "amount" in case.violations[0].message


def test_a_key_left_in_flight_is_stuck_in_flight(opts: DrillOptions) -> None:
    drill = Drill([PY, str(AGENTS / "gives_up.py"), "--thread", "{thread}"], opts)
    case = drill.run_case("before:charge")
    # attempt 2 meets the stalled provider and exits 3; attempt 3 takes the 409 as done
    assert [a.returncode for a in case.attempts] == [-signal.SIGKILL, 3, 0]
    assert set(case.kinds) == {"missing_effect", "stuck_in_flight"}, case.text()
    stuck = next(v for v in case.violations if v.kind == "stuck_in_flight")
    assert "{thread}:charge" in stuck.message and "still in flight" in stuck.message
