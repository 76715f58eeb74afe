"""Supervisor options on real drills: between-attempts command, a shared ledger, a single barrier."""

from __future__ import annotations

import sys
from pathlib import Path

from killdrill.drill import Drill, DrillOptions

AGENTS = Path(__file__).parents[1] / "agents"
PY = sys.executable


def steps(*extra: str) -> list[str]:
    return [PY, str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/ckpt.json", *extra]


def test_between_runs_before_each_resume_with_the_cases_thread(tmp_path: Path) -> None:
    log = tmp_path / "between.log"
    drill = Drill(
        steps(), DrillOptions(root=tmp_path / "r", between=[PY, str(AGENTS / "between.py"), str(log)])
    )
    case = drill.run_case("before:charge,after:record")
    assert case.ok, case.text()
    assert log.read_text().splitlines() == [
        f"before attempt 2 of {case.thread}",
        f"before attempt 3 of {case.thread}",
    ]


def test_a_failing_between_command_is_resume_failed(tmp_path: Path) -> None:
    between = [PY, str(AGENTS / "between.py"), str(tmp_path / "x.log"), "fail"]
    case = Drill(steps(), DrillOptions(root=tmp_path / "r", between=between)).run_case("before:charge")
    assert case.kinds[0] == "resume_failed"  # the cause first; then what the unfinished run lacks
    assert "missing_effect" in case.kinds
    assert "exited 4: reconciliation failed on purpose" in case.violations[0].message


def test_a_shared_postgresql_ledger_gives_the_same_verdicts(tmp_path: Path, store_url: str) -> None:
    verdicts = {}
    for name, ledger in (("file", None), ("shared", store_url)):
        options = DrillOptions(root=tmp_path / name, ledger_url=ledger, workers=2, launcher="fork")
        with Drill(steps("--bug", "nokey"), options) as drill:
            result = drill.run_all()
        verdicts[name] = [(c.schedule, c.kinds) for c in result.cases]
    assert verdicts["shared"] == verdicts["file"]
    assert ("after:charge", ("duplicate_effect",)) in verdicts["file"]


def test_a_single_barrier_point_still_catches_the_racy_claim(tmp_path: Path) -> None:
    cmd = [PY, str(AGENTS / "claimer.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]
    cmd += ["--store", str(tmp_path / "effects.sqlite"), "--racy"]
    options = DrillOptions(
        root=tmp_path / "r", resumers=2, barrier="after:effects.claim_read", launcher="fork"
    )
    with Drill(cmd, options) as drill:
        result = drill.run_all(["before:notify"] * 3)
    assert all("duplicate_effect" in c.kinds for c in result.cases), result.text()
