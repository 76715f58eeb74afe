"""A Temporal activity that calls its providers over HTTP (``httpx`` in an async activity,
``requests`` in a thread-pool one) records the activity's context: a duplicate from the
server's retry names the activity and its attempts, as one made through the in-process fakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from tests.frameworks import need

need("temporal", "temporalio")
pytest.importorskip("httpx")
pytest.importorskip("requests")

AGENT = str(Path(__file__).parents[1] / "agents" / "wire" / "charge_temporal.py")


def drill(tmp_path: Path, *extra: str) -> Drill:
    options = DrillOptions(
        root=tmp_path,
        integrations=("temporal",),
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
        launcher="fork",
        preload=("temporalio", "httpx", "requests"),
    )
    return Drill(["python", AGENT, "--thread", "{thread}", *extra], options)


@pytest.mark.parametrize(("point", "provider", "activity"), [
    ("after:charge", "payments", "charge"),  # async, httpx
    pytest.param("after:notify", "hooks", "notify", marks=pytest.mark.slow),  # thread pool, requests
])  # fmt: skip
def test_a_retried_activity_over_http_is_landed_by_its_attempts(
    tmp_path: Path, point: str, provider: str, activity: str
) -> None:
    with drill(tmp_path, "--bug", "attempt-key") as d:
        case = d.run_case(point)
    (dup,) = [v for v in case.violations if v.kind == "duplicate_effect" and v.provider == provider]
    assert f"landed by temporal activity {activity} attempts 1 and 2" in dup.message, case.text()
    assert dup.detail["runtime_attempts"] == [1, 2], dup.detail
    assert {c["context"]["run"] for c in dup.detail["runtime_calls"]} == {"{thread}"}


def test_the_keyed_form_passes_where_the_activity_is_retried(tmp_path: Path) -> None:
    with drill(tmp_path) as d:
        for point in ("after:charge", "after:notify"):
            case = d.run_case(point)
            assert case.ok, case.text()
