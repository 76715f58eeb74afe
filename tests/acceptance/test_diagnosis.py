"""A newcomer's cases end with their cause and fix (real kills, real resumes, real ledger)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.cli_support import run_cli as cli

AGENTS = Path(__file__).resolve().parents[1] / "agents" / "diagnosis"
NEWCOMER = [
    sys.executable,
    str(AGENTS / "lg_newcomer.py"),
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ck.sqlite",
]
needs_langgraph = pytest.mark.skipif(importlib.util.find_spec("langgraph") is None, reason="needs langgraph")


def _tail(text: str, n: int = 8) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


@needs_langgraph
def test_a_resume_that_drops_pending_tasks_is_named_unfinished_resume(tmp_path: Path) -> None:
    proc = cli(
        tmp_path,
        "run",
        "--langgraph",
        "--schedule",
        "before:checkpoint#3",
        "--",
        *NEWCOMER,
        "--resume",
        "next",
    )
    assert proc.returncode == 1, proc.stderr
    assert "missing_effect" in proc.stdout
    assert "unfinished_resume: exited 0 with the thread unfinished" in proc.stdout
    tail = _tail(proc.stdout, 4)
    assert "unfinished_resume" in tail and "snap.next or snap.tasks" in tail, proc.stdout


@needs_langgraph
def test_the_correct_resume_is_not_called_unfinished(tmp_path: Path) -> None:
    proc = cli(
        tmp_path,
        "run",
        "--langgraph",
        "--schedule",
        "before:checkpoint#3",
        "--",
        *NEWCOMER,
        "--resume",
        "full",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "unfinished" not in proc.stdout


@needs_langgraph
def test_one_uuid_key_is_one_root_cause_with_its_consequences(tmp_path: Path) -> None:
    proc = cli(
        tmp_path,
        "run",
        "--langgraph",
        "--schedule",
        "during:payments.charge",
        "--",
        *NEWCOMER,
        "--key",
        "uuid",
    )
    assert proc.returncode == 1, proc.stderr
    head = proc.stdout.splitlines()[0]
    assert head.endswith("duplicate_effect, key_changed"), head  # the webhook and email are not counted apart
    assert "consequences (other effects" in proc.stdout
    assert "webhooks 1 changed only by another violation's id" in proc.stdout
    assert "lost" not in proc.stdout.split("Effects:")[1].splitlines()[0]
    tail = _tail(proc.stdout, 4)
    assert "key_new_per_attempt" in tail and "idempotency_key" in tail, proc.stdout


def test_a_fixed_checkpoint_path_is_a_usage_error_before_any_case(tmp_path: Path) -> None:
    agent = [sys.executable, str(AGENTS / "json_agent.py"), "--thread", "{thread}", "--db", "ckpt.json"]
    proc = cli(tmp_path, "drill", "--", *agent)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""  # no case ran
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("killdrill: error:")]
    assert "fixed path outside the workdir, ckpt.json" in line and "'{workdir}/ckpt.json'" in line
    again = cli(tmp_path, "drill", "--", *agent)  # the file a run left behind: the same error
    assert again.returncode == 2 and "left by an earlier run" in again.stderr, again.stderr


def test_the_fixed_path_in_the_workdir_passes(tmp_path: Path) -> None:
    agent = [
        sys.executable,
        str(AGENTS / "json_agent.py"),
        "--thread",
        "{thread}",
        "--db",
        "{workdir}/ckpt.json",
    ]
    proc = cli(tmp_path, "run", "--schedule", "after:charge", "--", *agent)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("sub", ["points", "run", "drill"])
def test_an_unknown_integration_is_a_usage_error(tmp_path: Path, sub: str) -> None:
    agent = [
        sys.executable,
        str(AGENTS / "json_agent.py"),
        "--thread",
        "{thread}",
        "--db",
        "{workdir}/c.json",
    ]
    extra = ["--schedule", "after:charge"] if sub == "run" else []
    proc = cli(tmp_path, sub, "--integration", "langraph", *extra, "--", *agent)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown integration 'langraph': did you mean langgraph?" in proc.stderr


def test_a_kill_with_max_attempts_1_says_the_drill_stopped_the_run(tmp_path: Path) -> None:
    """No resume ran: the case says the attempt limit stopped it, never that a resume crashed."""
    agent = Path(__file__).resolve().parents[1] / "detection" / "agents" / "uuid_key.py"
    command = [sys.executable, str(agent), "--thread", "{thread}", "--workdir", "{workdir}"]
    proc = cli(tmp_path, "run", "--schedule", "during:payments.charge", "--max-attempts", "1", "--", *command)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the drill stopped after its attempt limit (1 attempt(s), max_attempts)" in proc.stdout, (
        proc.stdout
    )
    assert "cause: attempt_limit" in proc.stdout and "resume_crashed" not in proc.stdout, proc.stdout
    assert "leave --max-attempts out" in proc.stdout
