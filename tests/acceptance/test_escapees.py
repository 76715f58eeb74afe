"""The hostile-agent suite: escapees of every kind never outlive their attempt, nor the harness.

The agent (tests/agents/basic/escapees.py) leaves four kinds of daemon behind in every attempt: a
new session with an empty environment, a double-forked exec'd daemon, a double-forked daemon
that never execs, a pid-hopper.  Each writes "KIND PID" lines to a file while it lives, which
proves it really ran and catches one that keeps sending effects after the kill.  Leftovers
are counted by the marker (argv or process name) over repeated /proc scans for a second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from tests import leftovers

AGENT = Path(__file__).parents[1] / "agents" / "basic" / "escapees.py"
KINDS = {"session", "doublefork", "noexec", "hopper"}
PY = sys.executable


def _cases_started(root: Path) -> int:
    """The highest workdir number in the drill's root: a case that starts takes the next one (a
    passing case's workdir is renamed away and deleted in the background, so a count of the
    folders can fall)."""
    return max((int(p.name.split("-", 1)[0]) for p in root.iterdir() if p.name[:1].isdigit()), default=0)


@pytest.fixture
def marker() -> object:
    name = f"kd{uuid.uuid4().hex[:8]}"
    yield name
    leftovers.kill(name)  # a failed test must not leak into the next ones


def kinds_seen(late: Path) -> set[str]:
    lines = late.read_text().splitlines() if late.exists() else []
    return {line.split()[0] for line in lines if line.strip()}


def assert_nothing_left(marker: str, late: Path) -> None:
    """Nothing carries the marker over a second of scans, and nothing writes to the file."""
    size = late.stat().st_size
    alive = leftovers.survivors(marker, seconds=1.0)
    assert not alive, f"{len(alive)} process(es) outlived the attempt: {leftovers.describe(alive)}"
    assert late.stat().st_size == size, "an escapee sent effects after the kill"


@pytest.mark.parametrize("launcher", ["spawn", "fork"])
def test_no_escapee_outlives_its_case(tmp_path: Path, marker: str, launcher: str) -> None:
    late = tmp_path / "late"
    command = [PY, str(AGENT), "all", marker, str(late)]
    with Drill(command, DrillOptions(root=tmp_path / "r", launcher=launcher, discovery_runs=1)) as drill:
        result = drill.run_all()
        assert result.ok, result.text()
        assert len(result.cases) == 4
        assert kinds_seen(late) == KINDS  # every kind of escapee really ran
        assert_nothing_left(marker, late)  # with the fork template still up


def _harness_kills() -> list[Any]:
    """Per push each signal, each launcher and each worker count once; all nine pairs under -m slow."""
    per_push = {("SIGINT", "spawn", 1), ("SIGTERM", "fork", 2), ("SIGKILL", "spawn", 2)}
    return [
        pytest.param(
            sig,
            launcher,
            workers,
            id=f"{sig.name}-{launcher}-w{workers}",
            marks=() if (sig.name, launcher, workers) in per_push else pytest.mark.slow,
        )
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
        for launcher, workers in (("spawn", 2), ("fork", 2), ("spawn", 1))
    ]


@pytest.mark.parametrize(("sig", "launcher", "workers"), _harness_kills())
def test_killed_harness_leaves_nothing(
    tmp_path: Path, marker: str, launcher: str, workers: int, sig: signal.Signals
) -> None:
    """``drill --workers N`` signalled while attempts and their escapees run."""
    late = tmp_path / "late"
    argv = [PY, "-m", "killdrill", "drill", "--workers", str(workers), "--discovery-runs", "1"]
    argv += ["--launcher", launcher, "--root", str(tmp_path / "r")]
    argv += ["--", PY, str(AGENT), "all", marker, str(late)]
    harness = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=leftovers.stacks_env()
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "r").exists() or not any((tmp_path / "r").glob("*-before_work")):
            assert harness.poll() is None and time.monotonic() < deadline, "no case started"
            time.sleep(0.05)
        Path(str(late) + ".hold").touch()  # from now on attempts stay in their first step
        while len(leftovers.scan(marker)) < 4 * workers:  # four escapees per running attempt
            assert harness.poll() is None and time.monotonic() < deadline, "the attempts did not start"
            time.sleep(0.05)
        templates = leftovers.templates(harness.pid)
        assert templates
        # counted just before the signal: the process scan above takes a while under load, and a
        # case that ended meanwhile (its attempt past the held step) lets the next one start
        started = _cases_started(tmp_path / "r")
        harness.send_signal(sig)
        signalled = time.monotonic()
        try:
            _, err = harness.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(leftovers.hung(harness, f"the harness did not stop within 30 s of {sig.name}"))
        took = time.monotonic() - signalled
    finally:
        if harness.poll() is None:
            harness.kill()
    expected = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}[sig]
    assert harness.returncode == expected, err
    if sig != signal.SIGKILL:
        assert err.strip().splitlines()[-1].startswith("killdrill: "), err
        assert "Traceback" not in err, err
        assert took < 5, f"took {took:.2f}s to stop"
        assert _cases_started(tmp_path / "r") == started, "a queued case started after the signal"
        assert_nothing_left(marker, late)  # the harness waited for every keeper before exiting
    else:
        # Nobody is left in the harness to wait: the templates see its socket close, clean up, exit.
        assert leftovers.wait_gone(templates) < 10, "a fork template outlived the harness"
        assert_nothing_left(marker, late)


def test_keeper_reports_the_agents_status(tmp_path: Path) -> None:
    """The keeper exits last but with the agent's own status: a code, or the signal it died of."""
    from killdrill.process.forks import warden

    out, err = str(tmp_path / "out"), str(tmp_path / "err")
    env = dict(os.environ)
    for code, expected in (("raise SystemExit(7)", 7), ("import os; os.abort()", -signal.SIGABRT)):
        child = warden().spawn([PY, "-c", code], env=env, cwd=None, stdout=out, stderr=err, exec_=True)
        assert child.wait(timeout=30) == expected


def test_a_killed_spare_keeper_is_replaced_and_the_next_attempt_starts(tmp_path: Path) -> None:
    """The template keeps one keeper forked ahead of the next attempt; if that idle keeper is
    killed, the attempt still starts (under a new one) and nothing of the dead one is left."""
    import psutil

    from killdrill.process.forks import ForkTemplate

    out, err = str(tmp_path / "out"), str(tmp_path / "err")
    with ForkTemplate(PY, preload=()) as template:
        assert template._proc is not None
        deadline = time.monotonic() + 5  # the template forks it once it said it is ready
        while time.monotonic() < deadline and not psutil.Process(template._proc.pid).children():
            time.sleep(0.02)
        idle = [p for p in psutil.Process(template._proc.pid).children() if not p.children()]
        assert len(idle) == 1, idle  # the spare, waiting for a spec
        idle[0].kill()
        idle[0].wait(timeout=5)
        child = template.spawn([PY, "-c", "raise SystemExit(3)"], env=dict(os.environ), cwd=None,
                               stdout=out, stderr=err, exec_=True)  # fmt: skip
        assert child.wait(timeout=30) == 3
        assert child.keeper != idle[0].pid
        deadline = time.monotonic() + 5  # a new spare, for the attempt after
        while time.monotonic() < deadline and len(psutil.Process(template._proc.pid).children()) != 1:
            time.sleep(0.02)
        spares = psutil.Process(template._proc.pid).children()
        assert len(spares) == 1 and spares[0].pid not in (idle[0].pid, child.keeper), spares


@pytest.mark.parametrize("launcher", ["spawn", "fork"])
@pytest.mark.parametrize("victim", ["parricide", "regicide"])
def test_an_agent_that_kills_its_keeper_or_template_leaves_nothing(
    tmp_path: Path, marker: str, launcher: str, victim: str
) -> None:
    """Keeper and template are killable by the agent (same user): the survivor cleans up.

    Killing the keeper leaves the orphans to the template; killing the template sends every
    keeper its parent-death signal (SIGTERM), the attempt is a harness error, and the next
    attempt gets a new template.
    """
    from killdrill.drill.workdirs import RunContext
    from killdrill.process.supervisor import LaunchSpec, Supervisor
    from killdrill.records import HARNESS_ERROR

    late = tmp_path / "late"
    options = DrillOptions(root=tmp_path / "r", launcher=launcher)
    (tmp_path / ".killdrill").mkdir()
    with Drill([PY, str(AGENT), f"all,{victim}", marker, str(late)], options) as drill:
        run = RunContext(tmp_path, "t")
        spec: LaunchSpec = drill.setup.spec(run, 1, None)
        attempt = Supervisor().run(spec)
        assert attempt.returncode == -signal.SIGKILL, attempt
        assert kinds_seen(late) == KINDS
        assert_nothing_left(marker, late)  # with the fork template still up
        if victim == "regicide":
            assert attempt.outcome == HARNESS_ERROR, attempt
            if launcher == "fork":
                drill.close()  # its template is gone: the drill starts another
            again = drill.setup.spec(run, 2, None)
            (tmp_path / "ok.py").write_text("pass\n")
            again.argv = [PY, str(tmp_path / "ok.py")]
            assert Supervisor().run(again).returncode == 0
