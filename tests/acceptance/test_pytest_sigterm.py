"""SIGTERM (a CI runner cancelling the job) ends a user's pytest session as Ctrl-C does.

The inner sessions are real pytest processes with only the plugin to handle the signal (this
suite's own conftest is not theirs): at collection (``discover=`` runs the agent there), in a
test's discovery, in a test's case, and under xdist with the whole process group signalled, as a
runner does, or the controller alone, as ``docker stop`` does.  Each must stop within seconds,
print its summary, fail no test with ``SystemExit``, leave no agent process alive and no run's
folder: neither in the temporary folder nor under pytest's basetemp (the interrupted runs'
workdirs are evidence of nothing).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import leftovers
from tests.acceptance.test_harness_death import gone

SLEEPER = str(Path(__file__).parents[1] / "agents" / "basic" / "sleeper.py")

TESTS = {
    "collection": """
import pytest
AGENT = ["python", {sleeper!r}, {pids!r}]

@pytest.mark.killdrill(discover=AGENT)
def test_every_boundary(killdrill, kill_point):
    killdrill.run(AGENT, kill_point).assert_exactly_once()
""",
    "test": """
AGENT = ["python", {sleeper!r}, {pids!r}]

def test_one(killdrill):
    killdrill.run(AGENT, "offset:50000ms").assert_exactly_once()

def test_two(killdrill):
    killdrill.run(AGENT, "offset:50000ms").assert_exactly_once()
""",
    "case": """
AGENT = ["python", {case_sleeper!r}, "{{thread}}", {pids!r}]

def test_one(killdrill):
    killdrill.run(AGENT, "after:work").assert_exactly_once()

def test_two(killdrill):
    killdrill.run(AGENT, "after:work").assert_exactly_once()
""",
}

CASE_SLEEPER = """
import os, subprocess, sys, time
import killdrill

killdrill.boundary("before:work")
if not sys.argv[1].startswith("kd-discovery-"):  # a case's run, not the clean run
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(sys.argv[2], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(120)
killdrill.boundary("after:work")
"""


def _left(folder: Path) -> list[str]:
    """What a run of the session left under ``folder``: a killdrill folder or a run's workdir
    (``NNN-...``); pytest's own test folders are pytest's."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.name.startswith(("killdrill", ".killdrill")) or re.match(r"\d{3}-", p.name)
    )


@pytest.mark.parametrize(
    ("phase", "xdist"),
    [
        ("collection", ""),
        ("test", ""),
        ("case", ""),
        pytest.param("test", "group", marks=pytest.mark.slow),  # the case-xdist-group one per push
        ("case", "group"),
        ("case", "controller"),
    ],
    ids=["collection", "test", "case", "test-xdist-group", "case-xdist-group", "case-xdist-controller"],
)
def test_sigterm_stops_the_session_as_ctrl_c(pytester: pytest.Pytester, phase: str, xdist: str) -> None:
    """``xdist``: under ``-n 2``, SIGTERM to the whole process group (a runner's) or to the
    controller alone (``kill PID``, ``docker stop``)."""
    pids = pytester.path / "pids"
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 60\n")
    case_sleeper = pytester.path / "case_sleeper.py"
    case_sleeper.write_text(CASE_SLEEPER)
    test = TESTS[phase].format(sleeper=SLEEPER, case_sleeper=str(case_sleeper), pids=str(pids))
    pytester.makepyfile(test_sigterm=test)
    basetemp, tmp = pytester.path / "basetemp", pytester.path / "tmp"
    tmp.mkdir()
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-p",  # its summary imports Hypothesis in every process: 1.5-4 s each on a loaded machine
        "no:hypothesispytest",
        f"--basetemp={basetemp}",
        *(["-n", "2"] if xdist else []),
    ]
    env = {**os.environ, **leftovers.stacks_env(), "TMPDIR": str(tmp)}
    env.pop("PYTEST_XDIST_WORKER", None)
    inner = subprocess.Popen(
        args,
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not (pids.exists() and len(pids.read_text().split()) == 2):
        if time.monotonic() > deadline or inner.poll() is not None:
            inner.kill()
            pytest.fail(f"the agent never started:\n{inner.communicate()[0].decode()}")
        time.sleep(0.05)
    agent, child = (int(p) for p in pids.read_text().split())
    started = time.monotonic()
    os.killpg(inner.pid, signal.SIGTERM) if xdist == "group" else inner.send_signal(signal.SIGTERM)
    try:
        out = inner.communicate(timeout=20)[0].decode()
    except subprocess.TimeoutExpired:
        pytest.fail(leftovers.hung(inner, "the session did not stop within 20 s of SIGTERM"))
    took = time.monotonic() - started
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt: SIGTERM" in out, out
    assert "SystemExit" not in out and "INTERNALERROR" not in out and "FAILED" not in out, out
    # 0.6-2.3 s beside a CPU hog, 5.4 s once under the whole suite on 2 cores; a controller that
    # did not pass the SIGTERM on would wait for xdist's teardown to kill its busy workers
    assert took < 10, f"{took:.1f} s from SIGTERM to the session's end"
    deadline = time.monotonic() + 5
    while not (gone(agent) and gone(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(agent) and gone(child), "an agent process outlived the session"
    left = _left(basetemp) + _left(tmp)
    assert left == [], f"the session left {left}\n{out}"
