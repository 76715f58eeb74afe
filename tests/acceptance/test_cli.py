"""The command line as a user meets it: exit codes 0/1/2, one-line errors, JSON, no leftovers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.cli_support import run_cli as killdrill

AGENTS = Path(__file__).parents[1] / "agents"
STEPS = ["--", "python", str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]




def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr.strip().splitlines()[0]


def test_points_prints_the_catalogue(tmp_path: Path) -> None:
    proc = killdrill(tmp_path, "points", "--root", str(tmp_path / "r"), *STEPS)
    assert proc.returncode == 0, proc.stderr
    assert "8 kill points" in proc.stdout and "during:payments.charge" in proc.stdout


def test_run_exit_codes_and_json(tmp_path: Path) -> None:
    ok = killdrill(tmp_path, "run", "-s", "after:charge", "--root", str(tmp_path / "a"), *STEPS)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = tmp_path / "bad.json"
    bad = killdrill(
        tmp_path,
        "run",
        "-s",
        "after:charge",
        "--json",
        str(report),
        "--root",
        str(tmp_path / "b"),
        *STEPS,
        "--bug",
        "nokey",
    )
    assert bad.returncode == 1
    assert "duplicate_effect" in bad.stdout and "killdrill run --schedule after:charge" in bad.stdout
    data = json.loads(report.read_text())
    assert data["cases"][0]["violations"][0]["kind"] == "duplicate_effect"
    assert data["summary"]["violated"] == 1


def test_drill_runs_every_point_and_summarises(tmp_path: Path) -> None:
    proc = killdrill(tmp_path, "drill", "--root", str(tmp_path / "r"), *STEPS, "--bug", "nokey")
    assert proc.returncode == 1
    assert "8 cases: 6 exactly-once, 2 violated" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "-s", "before:nowhere", *STEPS],
            "bad kill point 'before:nowhere': not reached by a clean run",
        ),
        (["run", "-s", "befor:charge", *STEPS], "unknown kind 'befor'"),
        (
            ["run", "-s", "before:charge", "--", "no-such-agent-binary"],
            "command not found: no-such-agent-binary",
        ),
        (["drill"], "no command: put the agent's command after --"),
        (["run", "-s", "before:work", "--", "python", str(AGENTS / "exits.py"), "1"], "exited 1"),
        (
            ["drill", "--identity", "charge", *STEPS],
            "--identity 'charge': expected PROVIDER.OP=FIELD1,FIELD2",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    line = one_line_error(killdrill(tmp_path, args[0], "--root", str(tmp_path / "runs"), *args[1:]))
    assert line.startswith("killdrill: error:") and message in line
    leftovers = []  # agents of this test only: their KILLDRILL_WORKDIR lies under tmp_path
    for p in psutil.process_iter():
        try:
            if p.environ().get("KILLDRILL_WORKDIR", "").startswith(str(tmp_path)):
                leftovers.append(p)
        except psutil.Error:
            pass
    assert leftovers == []


def test_unknown_subcommand_is_usage_error(tmp_path: Path) -> None:
    proc = killdrill(tmp_path, "explode")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
