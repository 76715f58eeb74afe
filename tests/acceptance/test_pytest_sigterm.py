"""SIGTERM (a CI runner cancelling the job) ends a user's pytest session as Ctrl-C does.

The inner sessions are real pytest processes with only the plugin to handle the signal (this
suite's own conftest is not theirs): at collection (``discover=`` runs the agent there), in a
test's drill, and under xdist with the whole process group signalled, as a runner does.  Each
must stop within seconds, print its summary, fail no test with ``SystemExit`` and leave no agent
process alive.
"""

from __future__ import annotations

import os
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
}


@pytest.mark.parametrize(
    ("phase", "xdist"),
    [("collection", False), ("test", False), ("test", True)],
    ids=["collection", "test", "test-xdist-group"],
)
def test_sigterm_stops_the_session_as_ctrl_c(pytester: pytest.Pytester, phase: str, xdist: bool) -> None:
    pids = pytester.path / "pids"
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 60\n")
    pytester.makepyfile(test_sigterm=TESTS[phase].format(sleeper=SLEEPER, pids=str(pids)))
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        *(["-n", "2"] if xdist else []),
    ]
    env = {**os.environ, **leftovers.stacks_env()}
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
    os.killpg(inner.pid, signal.SIGTERM) if xdist else inner.send_signal(signal.SIGTERM)
    try:
        out = inner.communicate(timeout=20)[0].decode()
    except subprocess.TimeoutExpired:
        pytest.fail(leftovers.hung(inner, "the session did not stop within 20 s of SIGTERM"))
    took = time.monotonic() - started
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt: SIGTERM" in out, out
    assert "SystemExit" not in out and "INTERNALERROR" not in out and "FAILED" not in out, out
    assert took < 10, f"{took:.1f} s from SIGTERM to the session's end"
    deadline = time.monotonic() + 5
    while not (gone(agent) and gone(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(agent) and gone(child), "an agent process outlived the session"
