"""The text a newcomer reads in the first hour: what differs, where the evidence is, what columns mean."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from killdrill.drill import Drill
from killdrill.report.drill import render_case
from tests.cli_support import run_cli as cli

AGENTS = Path(__file__).parents[1] / "agents" / "basic"
STEPS = ["python", str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]


def test_state_diverged_names_the_differing_field_of_a_long_value(tmp_path: Path) -> None:
    drill = Drill(["python", str(AGENTS / "statement.py"), "--ckpt", "{workdir}/c.json"], root=tmp_path)
    case = drill.run_case("after:write_statement")
    assert case.kinds == ("state_diverged",)
    message = case.violations[0].message
    assert "runs: 2 (baseline 1)" in message, message
    assert "acme-industrial" not in message.split("ended as", 1)[1]  # equal fields are not repeated


def test_workdir_lines_say_where_the_evidence_is_or_that_it_is_gone(tmp_path: Path) -> None:
    # one clean run is enough to discover (this test is about the text, not about volatile fields)
    drill = Drill(STEPS, root=tmp_path, discovery_runs=1)
    passed = drill.run_case("after:charge")
    assert passed.ok and not Path(passed.workdir).exists()
    assert "Workdir: removed (the case passed; --keep keeps passing workdirs)" in render_case(passed)
    buggy = Drill([*STEPS, "--bug", "nokey"], root=tmp_path / "bad", discovery_runs=1)
    failed = buggy.run_case("after:charge")
    text = render_case(failed)
    state = Path(failed.workdir) / ".killdrill"
    assert f"Workdir: {failed.workdir}" in text
    assert f"evidence in {state}/: plan.json, result.json, ledger.sqlite, attempt-N.stdout / .stderr" in text
    for name in ("plan.json", "result.json", "ledger.sqlite", "attempt-1.stdout", "attempt-2.stderr"):
        assert (state / name).exists(), name


def test_catalogue_has_column_headers(tmp_path: Path) -> None:
    proc = cli(tmp_path, "points", "--root", str(tmp_path / "r"), "--", *STEPS)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["#", "point", "occurrence", "reached", "at"]
    assert lines[2].split()[:2] == ["1", "before:decide"]


def test_report_files_have_one_mode(tmp_path: Path) -> None:
    """report.json, junit.xml and report.html all follow the umask (no 0600 next to 0644)."""
    out = tmp_path / "rep"
    args = [
        "--runs",
        "3",
        "--seed",
        "1",
        "--workers",
        "1",
        "--discovery-runs",
        "1",
        "--report",
        str(out),
        "--root",
        str(tmp_path / "r"),
    ]
    proc = cli(tmp_path, "chaos", *args, "--", *STEPS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    umask = os.umask(0)
    os.umask(umask)
    assert set(modes.values()) == {0o666 & ~umask}, modes
    text = proc.stdout
    assert "kills missed (the attempt exited 0 before its random kill time: not a failure)" in text
    assert "kill(s) missed (the run ended first: not a failure)" in proc.stderr  # the progress line
    json.loads((out / "report.json").read_text())
