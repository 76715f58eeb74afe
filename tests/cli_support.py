"""Run the CLI as a user would: ``python -m killdrill ...`` in a subprocess, no harness variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AGENTS = Path(__file__).parent / "agents" / "basic"
STEPS = ["python", str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]


def run_cli(cwd: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``killdrill ARGS`` in ``cwd``; the environment without ``KILLDRILL_*`` (a drill's own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    return subprocess.run(
        [sys.executable, "-m", "killdrill", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
