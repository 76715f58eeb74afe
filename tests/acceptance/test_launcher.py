"""The pre-forking launcher: forked attempts behave as spawned ones, verdict for verdict."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.errors import UsageError
from killdrill.process.launcher import Launcher, python_target

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
PY = sys.executable


def steps(*extra: str) -> list[str]:
    return [PY, str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/ckpt.json", *extra]


@pytest.mark.parametrize(
    "bug", [pytest.param((), marks=pytest.mark.slow), ("--bug", "nokey")]
)  # the buggy agent per push: its verdicts differ by case, so they prove more
def test_fork_and_spawn_give_identical_verdicts(tmp_path: Path, bug: tuple[str, ...]) -> None:
    verdicts = {}
    for launcher in ("spawn", "fork"):
        with Drill(steps(*bug), DrillOptions(root=tmp_path / launcher, launcher=launcher)) as drill:
            result = drill.run_all()
        verdicts[launcher] = [(c.schedule, c.kinds) for c in result.cases]
        for case in result.cases:
            assert case.attempts[0].returncode == -signal.SIGKILL
            assert case.attempts[0].killed_at == case.schedule
    assert verdicts["fork"] == verdicts["spawn"]
    assert any(kinds for _, kinds in verdicts["spawn"]) == bool(bug)


def test_forked_child_is_set_up_as_a_fresh_process(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(
        "import os, sys, random\n"
        "print(os.getcwd(), sys.argv[1:], os.environ.get('PROBE'), os.getsid(0) == os.getpid(),"
        " random.random())\n"
        "sys.exit(7)\n"
    )
    with Launcher(PY, preload=["json"]) as launcher:
        outs = []
        for i in range(2):
            out = tmp_path / f"out{i}"
            child = launcher.spawn(
                [PY, str(script), "a", "b"],
                env={"PROBE": "yes"},
                cwd=str(tmp_path),
                stdout=str(out),
                stderr=str(tmp_path / "err"),
            )
            assert child.wait(timeout=10) == 7
            outs.append(out.read_text().split())
    assert outs[0][:5] == [str(tmp_path), "['a',", "'b']", "yes", "True"]
    assert outs[0][5] != outs[1][5]  # randomness reseeded in each child


def test_fork_needs_a_python_command(tmp_path: Path) -> None:
    assert python_target([PY, "-m", "killdrill.examples.settlement"])
    assert python_target([PY, "agent.py"])
    assert not python_target(["/bin/sh", "-c", "true"])
    with pytest.raises(UsageError, match="needs a `python -m MODULE"):  # the user's mistake: one line
        Drill(["/bin/sh", "-c", "true"], DrillOptions(root=tmp_path, launcher="fork"))
