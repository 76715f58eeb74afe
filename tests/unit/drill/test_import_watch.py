"""The discovery run's import watch (the bootstrap's ``sitecustomize``): an installed framework is
noticed, the agent's own module of the same name is not (a Temporal sample's ``workflows.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BOOTSTRAP = Path(__file__).parents[3] / "killdrill" / "agent" / "_bootstrap"


def _noticed(tmp_path: Path, agent_dir: Path) -> bool:
    (tmp_path / "w" / ".killdrill").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env.update(PYTHONPATH=str(BOOTSTRAP), KILLDRILL_DETECT="workflows", KILLDRILL_WORKDIR=str(tmp_path / "w"))
    code = [sys.executable, "-c", "import workflows"]
    subprocess.run(code, cwd=agent_dir, env=env, check=True, timeout=120)
    return (tmp_path / "w" / ".killdrill" / "imported-workflows").exists()


def test_the_agents_own_workflows_module_is_not_llama_indexs(tmp_path: Path) -> None:
    agent = tmp_path / "sample"
    agent.mkdir()
    (agent / "workflows.py").write_text("X = 1\n")
    assert not _noticed(tmp_path, agent)


def test_the_installed_workflows_package_is_noticed(tmp_path: Path) -> None:
    pytest.importorskip("workflows")
    assert _noticed(tmp_path, tmp_path)
