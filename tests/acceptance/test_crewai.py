"""The CrewAI Flows integration and the onboarding example, killed for real.

Skipped when CrewAI is not installed (extra ``crewai``; it pins ``openai<3``, so CI runs it in a
venv of its own).  CrewAI's import costs 5-10 s an attempt: the drills use ``--launcher fork``
and single points.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import run_cli
from tests.frameworks import need

need("crewai", "crewai")

AGENT = [
    "python",
    "-m",
    "killdrill.examples.onboarding_crewai",
    "--thread",
    "{thread}",
    "--workdir",
    "{workdir}",
]
METHODS = ("create_account", "charge_first_month", "send_welcome", "activate")


def run_at(tmp_path: Path, point: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    proc = run_cli(
        tmp_path,
        "run",
        "--launcher",
        "fork",
        "--schedule",
        point,
        "--integration",
        "crewai",
        "--json",
        str(out),
        "--",
        *AGENT,
        *extra,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr
    (case,) = json.loads(out.read_text())["cases"]
    return dict(case)


def test_points_are_named_after_the_methods(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "points", "--integration", "crewai", "--", *AGENT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for name in METHODS:
        for kind in ("before", "after", "committed"):
            assert f"{kind}:{name}" in proc.stdout, proc.stdout


@pytest.mark.parametrize("point", ["after:send_welcome", "committed:send_welcome"])
def test_correct_form_resumes_past_finished_methods(tmp_path: Path, point: str) -> None:
    case = run_at(tmp_path, point)
    assert case["verdict"] == "exactly-once", case


def test_kickoff_with_id_reruns_the_welcome_email(tmp_path: Path) -> None:
    case = run_at(tmp_path, "committed:send_welcome", "--bug", "rerun_finished")
    assert case["verdict"] == "violated"
    assert "duplicate_effect" in {v["kind"] for v in case["violations"]}
