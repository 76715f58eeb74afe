"""The LlamaIndex Workflows integration and the ticket example, killed for real.

Skipped when ``llama-index-workflows`` is not installed (extra ``llama_index``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli_support import run_cli
from tests.frameworks import need

need("llama_index", "workflows")

AGENT = [
    "python",
    "-m",
    "killdrill.examples.ticket_llama_index",
    "--thread",
    "{thread}",
    "--workdir",
    "{workdir}",
]
STEPS = ("open_ticket", "charge", "notify")


def drill(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    proc = run_cli(tmp_path, *args, "--integration", "llama_index", "--json", str(out), "--", *AGENT)
    assert proc.returncode in (0, 1), proc.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_points_are_named_after_the_steps(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "points", "--integration", "llama_index", "--", *AGENT)
    assert proc.returncode == 0, proc.stderr
    for name in STEPS:
        assert f"before:{name}" in proc.stdout and f"after:{name}" in proc.stdout
    assert "committed:checkpoint#3" in proc.stdout  # one per streamed save


def test_correct_form_passes_every_point(tmp_path: Path) -> None:
    report = drill(tmp_path, "drill")
    verdicts = {c["schedule"]: c["verdict"] for c in report["cases"]}
    assert len(verdicts) == 15 and set(verdicts.values()) == {"exactly-once"}, verdicts


def test_saving_before_the_effect_loses_it(tmp_path: Path) -> None:
    AGENT_BUG = [*AGENT, "--bug", "save_before_effect"]
    out = tmp_path / "report.json"
    proc = run_cli(
        tmp_path,
        "run",
        "--schedule",
        "committed:checkpoint#2",
        "--integration",
        "llama_index",
        "--json",
        str(out),
        "--",
        *AGENT_BUG,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (case,) = json.loads(out.read_text())["cases"]
    assert "missing_effect" in {v["kind"] for v in case["violations"]}


def test_hint_when_the_integration_is_off(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "points", "--", *AGENT)
    assert "--integration llama_index" in proc.stderr
