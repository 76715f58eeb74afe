"""Interrupting ``killdrill chaos --processes 2`` for real: Ctrl-C, SIGTERM and SIGKILL of the harness.

Every interruption must stop within about a second, kill every attempt, and leave nothing
running: leftovers are counted by a marker in the environment (the harness, its workers and
the agents inherit it) and in the agents' argv (their ``--root``), over repeated scans of
/proc.  Ctrl-C is simulated as the terminal does it: SIGINT to the whole foreground group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.examples import SETTLEMENT

if TYPE_CHECKING:
    from tests.conftest import SharedDiscoveries

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")

STOP_WITHIN_S = 1.0  # the promise; the assertion allows for a loaded 2-core CI machine
SLACK_S = 1.5


def marked(marker: str) -> list[int]:
    """Pids of live processes (zombies aside) carrying ``marker`` in their environment or argv."""
    needle = marker.encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            blobs = [Path(f"/proc/{entry.name}/{part}").read_bytes() for part in ("environ", "cmdline")]
        except (OSError, IndexError):
            continue
        if any(needle in blob for blob in blobs):
            found.append(int(entry.name))
    return found


def in_workers(marker: str) -> list[int]:
    """Marked processes a chaos worker started: agents (spawn), or the template and its forks."""
    out = []
    for pid in marked(marker):
        try:
            parents = [" ".join(p.cmdline()) for p in psutil.Process(pid).parents()]
        except psutil.Error:
            continue
        if any("killdrill.chaos.pool" in cmdline for cmdline in parents):
            out.append(pid)
    return out


@pytest.fixture(scope="module")
def discovery_file(
    tmp_path_factory: pytest.TempPathFactory, shared_discovery: SharedDiscoveries
) -> str:
    """One discovery for every test here: each job starts its runs at once."""
    path = tmp_path_factory.mktemp("disc") / "discovery.json"
    drill = Drill(list(SETTLEMENT), DrillOptions(timeout=30.0), root=str(path.parent))
    found = shared_discovery(drill).discover()
    path.write_text(json.dumps({"discovery": found.to_dict()}))
    return str(path)


def start_chaos(tmp_path: Path, marker: str, *extra: str) -> subprocess.Popen[str]:
    root = tmp_path / f"root-{marker}"
    cmd = [
        sys.executable,
        "-m",
        "killdrill",
        "chaos",
        "--runs",
        "40",
        "--seed",
        "4",
        "--processes",
        "2",
        "--no-shrink",
        "--report",
        str(tmp_path / "report"),
        "--root",
        str(root),
        *extra,
        "--",
        *SETTLEMENT,
    ]
    env = {**os.environ, "KD_TEST_MARK": marker}
    # A session of its own: the test can play the terminal (SIGINT to the whole group).
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def wait_for_runs(proc: subprocess.Popen[str], marker: str, tmp_path: Path) -> None:
    plans = tmp_path / "report" / "plans.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        # A third run planned: a worker came back for more, both are past their start-up.
        if plans.exists() and len(plans.read_text().splitlines()) >= 3 and in_workers(marker):
            return
        time.sleep(0.05)
    pytest.fail("no agent started within 90 s")


def stopped_within(marker: str, limit_s: float) -> float:
    """Seconds until no marked process is left; then 10 more scans over 1 s must find none."""
    t0 = time.monotonic()
    while marked(marker):
        if time.monotonic() - t0 > limit_s:
            pytest.fail(f"still running {limit_s:.1f}s after the signal: {marked(marker)}")
        time.sleep(0.02)
    took = time.monotonic() - t0
    for _ in range(10):
        time.sleep(0.1)
        assert marked(marker) == [], "a process came back after the scan found none"
    return took


# Every signal with spawned attempts; with forked ones, the two the harness must handle itself
# (its own SIGTERM: it stops its templates; its SIGKILL: they see the parent die).  Ctrl-C reaches
# the whole process group at once, templates included, so forked ctrl-c proves nothing more.
@pytest.mark.parametrize(
    ("launcher", "how", "code"),
    [
        ("spawn", "ctrl-c", 130),
        ("spawn", "sigterm", 143),
        pytest.param("spawn", "sigkill", -9, marks=pytest.mark.slow),
        pytest.param("fork", "sigterm", 143, marks=pytest.mark.slow),
        ("fork", "sigkill", -9),
    ],
)  # per push every signal and both launchers once; the other pairs under -m slow
def test_interrupted_chaos_stops_fast_and_leaves_nothing(
    tmp_path: Path, how: str, code: int, launcher: str, discovery_file: str
) -> None:
    marker = f"kdmark-{uuid.uuid4().hex[:10]}"
    proc = start_chaos(tmp_path, marker, "--launcher", launcher, "--discovery", discovery_file)
    try:
        wait_for_runs(proc, marker, tmp_path)
        t0 = time.monotonic()
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        exited = time.monotonic() - t0
        gone = stopped_within(marker, STOP_WITHIN_S + SLACK_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(
        f"{launcher} {how}: harness exited {proc.returncode} after {exited:.2f}s, "
        f"nothing left after {gone:.2f}s more"
    )
    assert proc.returncode == code, err
    assert exited < STOP_WITHIN_S + SLACK_S
    if how == "sigkill":
        return
    assert "Traceback" not in err, err
    after = err[err.rfind("killdrill chaos: interrupted") :].strip().splitlines()
    assert len(after) == 1 and f"interrupted by {'SIGINT' if how == 'ctrl-c' else 'SIGTERM'}" in after[0], err
    # The runs finished before the signal are reported; the files are whole.
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert data["chaos"]["stopped"].startswith("interrupted")
    assert (tmp_path / "report" / "junit.xml").read_text().startswith("<?xml")
