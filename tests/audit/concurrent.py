"""Drills at once, to their end: each a correct agent, so any exit but 0 is a false alarm; then
what they left (processes, folders, broker and database namespaces), with no next run to sweep."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.audit import inspect
from tests.audit.topologies import POSTGRES, REPO, Topology


@dataclass
class Finished:
    topology: str
    exit: int
    seconds: float
    cases: int
    tracebacks: int
    survivors: list[int] = field(default_factory=list)
    left: dict[str, list[str]] = field(default_factory=dict)
    tail: str = ""


def run_together(topologies: list[Topology], base: Path, limit_s: float = 1800) -> list[Finished]:
    started = []
    for topology in topologies:
        tmp = Path(tempfile.mkdtemp(prefix="audit-together-", dir=base))
        env = {**os.environ, "TMPDIR": str(tmp)}
        cmd = [sys.executable, "-m", "killdrill", "drill", "--discovery-runs", "1", *topology.args]
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        started.append((topology, tmp, proc, time.monotonic()))
    out = []
    for topology, tmp, proc, t0 in started:
        try:
            stdout, stderr = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        seconds = time.monotonic() - t0
        found = inspect.claims(tmp)
        time.sleep(0.5)
        cases = sum(1 for line in stdout.splitlines() if "exactly-once" in line or "violated" in line)
        done = Finished(
            topology.name,
            proc.returncode,
            round(seconds, 1),
            cases,
            (stdout + stderr).count("Traceback"),
            sorted(inspect.processes_of(str(tmp))),
            inspect.left(tmp, found, POSTGRES),
            "" if proc.returncode == 0 else (stdout + stderr)[-1500:],
        )
        out.append(done)
        if not done.left and not done.survivors:
            tmp.rmdir()
    return out
