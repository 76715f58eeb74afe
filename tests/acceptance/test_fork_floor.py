"""The prefork benchmark's floor (tests/benchmarks/fork_floor.py), which the row fails without:
each case's attempt 1 must be killed at its point and attempt 2 must resume to exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_floor_kills_at_each_point_reached_and_resumes_every_case(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "tests.benchmarks.fork_floor"]
    argv += ["--point", "during:payments.charge", "--point", "before:never"]
    argv += ["--", "python", "-m", "killdrill.examples.settlement", "--thread", "{thread}"]
    argv += ["--db", "{workdir}/ckpt.sqlite"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")} | {"TMPDIR": str(tmp_path)}
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # a point the run never reaches is not killed: the counts tell, and the benchmark refuses them
    assert json.loads(proc.stdout) == {"cases": 2, "killed": 1, "resumed": 2}
    assert list(tmp_path.iterdir()) == []  # its cases' folders go with it
