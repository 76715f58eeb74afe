"""Where a drill's time went: each case's phases in its JSON, and one line naming the runtime's
wait when it took most of the cases' time (killdrill/drill/phases.py, killdrill/report/waits.py).

Real drills: a Temporal worker killed inside an activity whose start-to-close timeout is 3 s (the
resume waits for the server to hand the activity on), and the bundled plain settlement agent,
which waits on nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.report.drill import render_cases
from killdrill.report.waits import waits_line
from tests.frameworks import need

REPO = Path(__file__).resolve().parents[2]
TEMPORAL_AGENT = str(REPO / "tests" / "agents" / "basic" / "temporal_charge.py")


def timed_case(d: Drill, schedule: str) -> tuple[float, dict[str, float]]:
    t0 = time.monotonic()
    result = d.run_case(schedule)
    wall = time.monotonic() - t0
    assert result.ok, result.text()
    return wall, result.to_dict()["phases"]


def test_a_fast_agent_gets_phases_that_sum_to_its_cases_and_no_wait_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "killdrill.examples.settlement", "--thread", "{thread}"]
    command += ["--db", "{workdir}/ckpt.sqlite"]
    with Drill(command, DrillOptions(root=tmp_path, discovery_runs=1), launcher="fork") as d:
        d.points()
        cases = [d.run_case("during:payments.charge")]
        wall, phases = timed_case(d, "committed:charge_customer")
    assert all(c.ok for c in cases), cases[0].text()
    assert {"setup", "launch", "readiness", "run to kill", "resume", "verdict"} <= set(phases), phases
    assert sum(phases.values()) == pytest.approx(wall, rel=0.05, abs=0.02), (phases, wall)
    assert all(not c.waits for c in cases)
    assert waits_line(cases) is None
    assert "waited" not in render_cases(cases)


@pytest.mark.slow  # a Temporal dev server, a clean run and a case that waits 3 s: ~15 s
def test_a_kill_inside_an_activity_names_its_start_to_close_timeout(tmp_path: Path) -> None:
    need("temporal", "temporalio")
    command = [sys.executable, TEMPORAL_AGENT, "--thread", "{thread}", "--start-to-close", "3"]
    options = DrillOptions(root=tmp_path, integrations=("temporal",), discovery_runs=1, timeout=60)
    with Drill(command, options, launcher="fork", preload=("temporalio.worker",)) as d:
        assert "before:charge" in d.points()
        result = d.run_case("before:charge")
    assert result.ok, result.text()
    (wait,) = result.waits
    assert (wait["setting"], wait["setting_s"], wait["unit"]) == (
        "start_to_close_timeout",
        3.0,
        "activity charge",
    )
    assert 2.0 < wait["seconds"] < 6.0, wait  # the server holds the activity 3 s from its start
    line = waits_line([result])
    assert line is not None
    assert "start_to_close_timeout (3 s) of activity charge after a kill" in line, line
    text = render_cases([result]).splitlines()
    assert text[-2] == line, text  # the line before the totals
    phases = result.to_dict()["phases"]
    assert sum(phases.values()) > 3.0 and "resume" in phases, phases


@pytest.mark.slow  # a Temporal dev server, two worker replicas and their starter: ~15 s
def test_a_deployed_worker_killed_mid_activity_waits_its_timeout_and_backoff_only(tmp_path: Path) -> None:
    """Two worker replicas (the killed one kept down): the survivor takes the activity over once
    its start-to-close timeout (2 s) and its retry's backoff (0.1 s) passed, not later (the dev
    server fires timers when due), and the deployment's case names that wait."""
    need("temporal", "temporalio")
    module = "killdrill.examples.transfer_temporal"
    options = DrillOptions(
        root=tmp_path, integrations=("temporal",), discovery_runs=1, timeout=60,
        serve={"worker": f"python -m {module} worker --task-queue {{thread}}"},
        replicas={"worker": 2}, restart_delay=8.0, ready={"worker": "log:worker polling"},
    )  # fmt: skip
    starter = ["python", "-m", module, "starter", "--thread", "{thread}", "--task-queue", "{thread}"]
    with Drill(starter, options) as d:
        result = d.run_case("worker:during:payments.charge")
    assert result.ok, result.text()
    (wait,) = result.waits
    assert (wait["setting"], wait["unit"]) == ("start_to_close_timeout", "activity withdraw"), wait
    assert 1.5 < wait["seconds"] < 2.1 + 0.4, wait  # from the kill, just after the activity started
    assert "killed worker's sticky queue" in " ".join(wait["removed"]) and wait["kept"], wait
