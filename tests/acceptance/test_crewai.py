"""The CrewAI Flows integration and the onboarding example, killed for real.

Skipped when CrewAI is not installed (extra ``crewai``; it pins ``openai<3``, so CI runs it in a
venv of its own).  CrewAI's import costs 5-10 s an attempt: the drills use ``--launcher fork``
and single points.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from tests.cli_support import run_cli
from tests.frameworks import need
from tests.repeated import Catch, catch_every_time, pass_every_round, repeat, workers

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


def _options(tmp_path: Path, workers: int = 1) -> DrillOptions:
    return DrillOptions(
        root=tmp_path,
        integrations=("crewai",),
        launcher="fork",
        preload=("killdrill.examples.onboarding_crewai",),
        timeout=120,
        discovery_runs=1,
        workers=workers,
    )


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


PRELOADED_FLOW = """
import sys, threading, time
from killdrill.integrations import crewai as integration
integration.activate()
for name in integration.INTEGRATION.preload:
    __import__(name)
threads = threading.active_count()
before = set(sys.modules)
from killdrill.examples.onboarding_crewai import build_flow
started = time.monotonic()
build_flow("t", sys.argv[1], bug=None)()
new = sorted(set(sys.modules) - before)
heavy = [m for m in new if m.split(".")[0] in ("lance_namespace_urllib3_client", "pyarrow")]
print(threads, len(new), round(time.monotonic() - started, 1), heavy[:5])
"""


def test_the_fork_template_preloads_what_a_flow_imports_at_init(tmp_path: Path) -> None:
    """A Flow's __init__ builds a Memory (LanceDB storage): after the integration's preload it
    imports no lance-namespace or pyarrow module of its own (was ~10 s an attempt, forked),
    and the preload starts no thread (the fork template refuses one that does)."""
    cmd = [sys.executable, "-c", PRELOADED_FLOW, str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    threads, _, _, heavy = proc.stdout.split(maxsplit=3)
    assert threads == "1" and heavy.strip() == "[]", proc.stdout


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


@pytest.mark.slow
def test_correct_form_passes_every_point_20_times(tmp_path: Path) -> None:
    """Every point, 20 rounds, no false alarm (KILLDRILL_CREWAI_REPEAT=N rounds): one discovery and
    one fork template, CrewAI's ~9 s import paid once, not per attempt."""
    with Drill(AGENT, _options(tmp_path, workers=workers())) as d:
        points = d.points()
        for name in METHODS:
            assert {f"before:{name}", f"after:{name}", f"committed:{name}"} <= set(points), points
        pass_every_round(d, int(os.environ.get("KILLDRILL_CREWAI_REPEAT", "20")))


BUG_CASES = {
    # kickoff(inputs={"id": ...}) re-runs send_welcome, which has no done-flag and no lookup
    "rerun_finished": {
        "during:mailbox.send": Catch(("duplicate_effect",), "mailbox"),
        "after:send_welcome": Catch(("duplicate_effect",), "mailbox"),
        "committed:send_welcome": Catch(("duplicate_effect",), "mailbox"),
        "committed:activate": Catch(("duplicate_effect",), "mailbox"),
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUG_CASES))
def test_each_planted_bug_is_caught_at_its_points_every_time(tmp_path: Path, bug: str) -> None:
    """Each point KILLDRILL_BUG_REPEAT times (10): the expected kinds on the expected provider."""
    with Drill([*AGENT, "--bug", bug], _options(tmp_path)) as d:
        catch_every_time(d, BUG_CASES[bug], repeat())
