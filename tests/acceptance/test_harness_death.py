"""When the harness itself dies (SIGKILL, Ctrl-C, SIGTERM), no agent process outlives it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import leftovers

AGENTS = Path(__file__).parents[1] / "agents" / "basic"

HARNESS = """
import sys
from killdrill.drill import Drill, DrillOptions
options = DrillOptions(root={root!r}, timeout=60, discovery_runs=1)
drill = Drill([sys.executable, {agent!r}, {pids!r}], options)
drill.discover()
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead; this sandbox's init may not reap
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_agents_die_with_the_harness(tmp_path: Path, sig: signal.Signals) -> None:
    pids_file = tmp_path / "pids"
    code = HARNESS.format(agent=str(AGENTS / "sleeper.py"), pids=str(pids_file), root=str(tmp_path / "r"))
    harness = subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, env=leftovers.stacks_env()
    )
    deadline = time.monotonic() + 30
    while not (pids_file.exists() and len(pids_file.read_text().split()) == 2):
        assert time.monotonic() < deadline and harness.poll() is None, harness.stderr.read().decode()  # type: ignore[union-attr]
        time.sleep(0.05)
    agent, grandchild = (int(p) for p in pids_file.read_text().split())
    harness.send_signal(sig)
    try:
        harness.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(leftovers.hung(harness, f"the harness did not stop within 10 s of {sig.name}"))
    harness.stderr.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 5
    while not (gone(agent) and gone(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(agent), f"the agent outlived the harness ({sig.name})"
    # Even after a SIGKILL of the harness: the fork template sees its socket close and
    # has the attempt's keeper kill the whole tree.
    assert gone(grandchild), f"the agent's child outlived the harness ({sig.name})"
