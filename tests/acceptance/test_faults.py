"""Faults beyond the kill: holds (a hung call) and drains (SIGTERM with a grace period)."""

from __future__ import annotations

import sys
from pathlib import Path

from killdrill.drill import Drill, DrillOptions
from killdrill.records import DRAINED, KILLED

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
PY = sys.executable


def test_hold_fires_the_agents_own_timeout_and_the_run_recovers_once(tmp_path: Path) -> None:
    drill = Drill([PY, str(AGENTS / "timeouts.py"), "--thread", "{thread}"], DrillOptions(root=tmp_path))
    case = drill.run_case("before:charge~3s")
    assert case.ok, case.text()
    (attempt,) = case.attempts
    assert attempt.returncode == 0
    assert "timeout on try 1; retrying" in attempt.stdout_tail
    assert "held at before:charge for 3000ms" in attempt.notes
    charges = [c for c in case.ledger.calls if c.op == "charge"]
    assert [c.outcome for c in charges] == ["created"]


def drainer(*extra: str) -> list[str]:
    return [PY, str(AGENTS / "drainer.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json", *extra]


def test_an_agent_that_drains_is_counted_drained_and_resumes_exactly_once(tmp_path: Path) -> None:
    drill = Drill(drainer(), DrillOptions(root=tmp_path, signal="TERM", grace=5))
    case = drill.run_case("before:b")
    assert case.ok, case.text()
    first = case.attempts[0]
    assert first.outcome == DRAINED and first.returncode == 75 and first.signal == "SIGTERM"
    # it finished step b after the signal and stopped before c; the resume did only c
    assert [e.label for e in case.attempts[1].trace] == ["before:c", "during:tickets.create", "after:c"]


def test_an_agent_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    options = DrillOptions(root=tmp_path, signal="TERM", grace=0.2, discovery_runs=1)
    case = Drill(drainer("--ignore-term"), options).run_case("before:b")
    first = case.attempts[0]
    assert first.outcome == KILLED and first.returncode == -9
    assert first.signal == "SIGTERM+SIGKILL"
    assert any("ignored SIGTERM: killed after the 0.2s grace period" in n for n in first.notes)
    assert case.ok, case.text()  # and the resume still lands every ticket once
