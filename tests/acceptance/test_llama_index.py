"""The LlamaIndex Workflows integration and the ticket example, killed for real.

Skipped when ``llama-index-workflows`` is not installed (extra ``llama_index``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from tests.cli_support import run_cli
from tests.frameworks import need
from tests.repeated import Catch, catch_every_time, pass_every_round, repeat, workers

need("llama-index", "workflows")

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


def _options(tmp_path: Path, workers: int = 1) -> DrillOptions:
    """Forked attempts from a template that imported the example (and so Workflows) once."""
    return DrillOptions(
        root=tmp_path,
        integrations=("llama_index",),
        launcher="fork",
        preload=("killdrill.examples.ticket_llama_index",),
        timeout=60,
        discovery_runs=1,
        workers=workers,
    )


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


@pytest.mark.slow
def test_correct_form_passes_every_point_20_times(tmp_path: Path) -> None:
    """Every point, 20 rounds, no false alarm (KILLDRILL_LLAMA_INDEX_REPEAT=N rounds), forked attempts."""
    with Drill(AGENT, _options(tmp_path, workers=workers())) as d:
        assert len(d.points()) == 15
        pass_every_round(d, int(os.environ.get("KILLDRILL_LLAMA_INDEX_REPEAT", "20")))


BUG_CASES = {
    "save_before_effect": {
        # the context saved with charge marked done, the charge not yet sent: the resume skips it,
        # and the email then carries no charge id (unexpected_effect: another body)
        "committed:checkpoint#2": Catch(("missing_effect", "unexpected_effect"), "payments"),
        "committed:checkpoint#3": Catch(("missing_effect",), "mailbox"),  # the email marked sent, never sent
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUG_CASES))
def test_each_planted_bug_is_caught_at_its_points_every_time(tmp_path: Path, bug: str) -> None:
    """Each point KILLDRILL_BUG_REPEAT times (10): the expected kinds on the expected provider."""
    with Drill([*AGENT, "--bug", bug], _options(tmp_path)) as d:
        catch_every_time(d, BUG_CASES[bug], repeat())
