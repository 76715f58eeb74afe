"""The harness SIGKILLed mid-drill, per topology: what survives it, and what the next run leaves.

Each round starts ``killdrill drill`` on a correct agent with a private temporary folder, waits
until a case (not the clean run) is under way (and, for a topology with a broker or a database,
holds its namespace there), waits a random moment more, SIGKILLs the harness,
then measures how long until no process of the drill is alive and counts those alive 30 s
after (survivors), runs ``killdrill clean`` (the
next killdrill run on the machine) and counts what is still there: folders in the temporary
folder, Redis keys, RabbitMQ vhosts, PostgreSQL schemas the killed harness had claimed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.audit import inspect
from tests.audit.topologies import POSTGRES, REPO, Topology


@dataclass
class Kill:
    topology: str
    killed_after_s: float
    gone_after_s: float = 0.0  # until no process of the drill was alive
    seen_after_kill: list[str] = field(default_factory=list)  # alive at the first scan after it
    survivors: list[int] = field(default_factory=list)  # alive 30 s after it
    left_before: dict[str, list[str]] = field(default_factory=dict)
    left_after: dict[str, list[str]] = field(default_factory=dict)
    clean_exit: int = 0
    tracebacks: int = 0
    note: str = ""


def _mid_drill(tmp: Path) -> bool:
    """A case's workdir exists (not a clean run's: ``NNN-discovery-K``)."""
    return any("discovery" not in wd.name for wd in tmp.glob("killdrill-*/[0-9][0-9][0-9]-*"))


def write_files(topology: Topology) -> None:
    for path, text in topology.files.items():
        Path(path).write_text(text, encoding="utf-8")


def kill_once(topology: Topology, base: Path, rng: random.Random, limit_s: float = 240) -> Kill:
    tmp = Path(tempfile.mkdtemp(prefix="audit-", dir=base))
    env = {**os.environ, "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "killdrill", "drill", "--discovery-runs", "1", *topology.args]
    stderr = tmp.parent / f"{tmp.name}.stderr"
    with open(stderr, "wb") as err:
        harness = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
    start = time.monotonic()
    while not _mid_drill(tmp):
        if harness.poll() is not None or time.monotonic() - start > limit_s:
            harness.kill()
            harness.wait()
            shutil.rmtree(tmp, ignore_errors=True)
            stderr.unlink()
            return Kill(topology.name, -1, note=f"ended before a case (exit {harness.returncode})")
        time.sleep(0.01)
    if topology.needs:  # a broker's or database's: kill while a case holds its namespace there
        held = time.monotonic() + 30
        while time.monotonic() < held and harness.poll() is None:
            if set(inspect.left(tmp, inspect.claims(tmp), POSTGRES)) - {"folders"}:
                break
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.3))
    else:
        time.sleep(rng.uniform(0, topology.kill_within_s))
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    result = Kill(topology.name, round(time.monotonic() - start, 2))
    # the templates see the harness's socket close and kill every attempt
    gone, result.seen_after_kill = inspect.gone_within(str(tmp), 30.0)
    result.gone_after_s = round(gone, 2)
    result.survivors = sorted(inspect.processes_of(str(tmp)))
    found = inspect.claims(tmp)
    result.left_before = inspect.left(tmp, found, POSTGRES)
    clean = subprocess.run(
        [sys.executable, "-m", "killdrill", "clean"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    result.clean_exit = clean.returncode
    result.tracebacks = clean.stderr.count("Traceback") + stderr.read_text(errors="replace").count(
        "Traceback"
    )
    result.left_after = inspect.left(tmp, found, POSTGRES)
    if not result.left_after and not result.survivors:
        tmp.rmdir()
        stderr.unlink()
    return result
