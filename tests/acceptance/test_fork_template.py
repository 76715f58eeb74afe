"""The fork template (``--launcher fork``): forked attempts behave as spawned ones, verdict for verdict."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.errors import UsageError
from killdrill.process.forks import ForkTemplate, python_target

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
    with ForkTemplate(PY, preload=["json"]) as template:
        outs = []
        for i in range(2):
            out = tmp_path / f"out{i}"
            child = template.spawn(
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


def _ahead(template: ForkTemplate) -> list[int]:
    """The agents forked ahead: children of the template's idle keeper."""
    process = psutil.Process(template._proc.pid)  # type: ignore[union-attr]
    return [c.pid for keeper in process.children() for c in keeper.children()]


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_attempt_starts_in_the_agent_forked_ahead(tmp_path: Path) -> None:
    """After a forked attempt, the spare keeper forks the next attempt's agent before it is
    asked; the next attempt runs in it, set up as a fresh process all the same.  One
    killed while it waited is replaced by a fork made then; a spawned command discards it."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import os, sys\nprint(os.getpid(), os.getcwd(), os.environ.get('PROBE'))\nsys.exit(3)\n"
    )

    def run(template: ForkTemplate, argv: list[str], i: int, exec_: bool = False) -> tuple[int, list[str]]:
        out = tmp_path / f"out{i}"
        child = template.spawn(
            argv,
            env={"PROBE": str(i)},
            cwd=str(tmp_path),
            stdout=str(out),
            stderr=str(out) + ".err",
            exec_=exec_,
        )
        code = child.wait(timeout=10)
        return code, [str(child.pid), *out.read_text().split()[1:]] if code == 3 else []

    with ForkTemplate(PY, preload=["json"]) as template:
        assert run(template, [PY, str(script)], 0)[0] == 3
        _wait_for(lambda: len(_ahead(template)) == 1)
        [waiting] = _ahead(template)
        code, seen = run(template, [PY, str(script)], 1)
        assert (code, seen) == (3, [str(waiting), str(tmp_path), "1"])  # it ran in the one forked ahead
        _wait_for(lambda: len(_ahead(template)) == 1)
        [killed] = _ahead(template)
        os.kill(killed, signal.SIGKILL)
        code, seen = run(template, [PY, str(script)], 2)
        assert code == 3 and seen[0] != str(killed) and seen[1:] == [str(tmp_path), "2"]
        # killed as it is given its spec (stopped, so the spec reaches its pipe, then killed):
        # before, its silence read as "set up" and the attempt was the dead one (exit -9)
        _wait_for(lambda: len(_ahead(template)) == 1)
        [stopped] = _ahead(template)
        os.kill(stopped, signal.SIGSTOP)
        threading.Timer(0.3, os.kill, (stopped, signal.SIGKILL)).start()
        code, seen = run(template, [PY, str(script)], 4)
        assert code == 3 and seen[0] != str(stopped) and seen[1:] == [str(tmp_path), "4"]
        _wait_for(lambda: len(_ahead(template)) == 1)
        [discarded] = _ahead(template)
        code, _ = run(template, ["/bin/sh", "-c", "exit 3"], 3, exec_=True)  # spawned, not forked
        assert code == 3
        _wait_for(lambda: not psutil.pid_exists(discarded) or psutil.Process(discarded).status() == "zombie")
        _wait_for(lambda: _ahead(template) == [])  # and the next spare forks none
