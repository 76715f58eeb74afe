"""The guide's "Drill your own agent" (docs/getting-started.md), followed as a user would: a fresh
virtualenv outside the clone, killdrill installed from the checkout path by pip (not editable), the
agents and commands copied from the guide into an empty folder.  It proves the package works
without the clone on ``sys.path``: the bootstrap, ``killdrill.fakes`` and the console script come
from site-packages.

Slow (a fresh install with LangGraph): run with ``pytest -m slow tests/acceptance/test_readme_fresh_venv.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.test_readme_agents import agent_source, commands

CHECKOUT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _only_when_asked(request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow (a fresh virtualenv and pip install): run with pytest -m slow")


def run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_readme_agents_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILLDRILL_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    made = run([sys.executable, "-m", "venv", str(venv)], work, env)
    assert made.returncode == 0, made.stderr
    pip = run([str(venv / "bin" / "pip"), "install", "-q", f"{CHECKOUT}[langgraph]"], work, env)
    assert pip.returncode == 0, pip.stderr[-3000:]

    where = run(
        [str(venv / "bin" / "python"), "-c", "import killdrill.fakes as f; print(f.__file__)"], work, env
    )
    assert where.returncode == 0 and where.stdout.startswith(str(venv)), where.stdout + where.stderr
    version = run(["bash", "-c", "killdrill --version"], work, env)
    assert version.returncode == 0 and version.stdout.startswith("killdrill "), version.stderr

    (work / "agent.py").write_text(agent_source("agent.py"))
    (work / "graph_agent.py").write_text(agent_source("graph_agent.py"))
    outputs = {}
    for line in [*commands("agent.py"), *commands("graph_agent.py")]:
        proc = run(["bash", "-c", line], work, env)
        outputs[line] = proc
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert "warning" not in proc.stderr, proc.stderr
    drills = [p.stdout for line, p in outputs.items() if line.startswith("killdrill drill")]
    assert any("8 cases: 8 exactly-once" in out for out in drills)
    assert any("16 cases: 16 exactly-once" in out for out in drills)
