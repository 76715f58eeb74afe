"""pydantic-ai's own durable execution (DBOS, Temporal), drilled by the runtime integrations as is.

The examples ``killdrill.examples.pydantic_ai_dbos`` / ``pydantic_ai_temporal`` carry pydantic-ai's
``DBOSDurability`` / ``TemporalDurability``: no killdrill code in the agent, no more code in the
integrations for DBOS; on Temporal the tool-call activity's points are named after the tool.
Skipped without the ``pydantic_ai`` extra (required in CI).  Forked attempts, single points.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from killdrill.drill import Drill, DrillOptions
from tests.frameworks import need

need("pydantic-ai", "pydantic_ai", "dbos", "temporalio")

DBOS_PRELOAD = ("dbos", "pydantic_ai", "pydantic_ai.durable_exec.dbos", "pydantic_ai.models.function")
TEMPORAL_PRELOAD = (
    "temporalio.client",
    "temporalio.worker",
    "pydantic_ai",
    "pydantic_ai.durable_exec.temporal",
)


def _dbos(tmp_path: Path, *args: str) -> Drill:
    cmd = [
        "python",
        "-m",
        "killdrill.examples.pydantic_ai_dbos",
        "--thread",
        "{thread}",
        "--workdir",
        "{workdir}",
    ]
    options = DrillOptions(root=tmp_path, integrations=("dbos",), timeout=60, discovery_runs=1)
    return Drill([*cmd, *args], options, launcher="fork", preload=DBOS_PRELOAD)


def _temporal(tmp_path: Path, *args: str) -> Drill:
    cmd = ["python", "-m", "killdrill.examples.pydantic_ai_temporal", "--thread", "{thread}"]
    options = DrillOptions(root=tmp_path, integrations=("temporal",), timeout=30, discovery_runs=1)
    return Drill([*cmd, *args], options, launcher="fork", preload=TEMPORAL_PRELOAD)


def _points(d: Drill) -> list[str]:
    return list(d.points())


def test_dbos_steps_of_a_pydantic_ai_agent_are_points(tmp_path: Path) -> None:
    with _dbos(tmp_path) as d:
        points = _points(d)
        for name in ("bill", "billing__model.request", "charge_card"):
            for kind in ("before", "after", "committed"):
                assert f"{kind}:{name}" in points, points
        assert "committed:billing__model.request#2" in points
        case = d.run_case("after:charge_card")  # re-run by recovery: the stable key is replayed
    assert case.ok and case.attempts[0].killed_at == "after:charge_card", case.text()


def test_dbos_uuid_key_in_a_pydantic_ai_tool_is_caught(tmp_path: Path) -> None:
    with _dbos(tmp_path, "--bug", "uuid_key") as d:
        case: Any = d.run_case("after:charge_card")
    assert set(case.kinds) == {"duplicate_effect", "key_changed"}, case.text()


def test_temporal_tool_call_activity_is_named_after_the_tool(tmp_path: Path) -> None:
    with _temporal(tmp_path, "--bug", "uuid_key") as d:
        points = _points(d)
        for kind in ("before", "after", "committed"):
            assert f"{kind}:charge_card" in points, points
            assert f"{kind}:agent__billing__model_request" in points, points
        case = d.run_case("after:charge_card")  # the server retries the activity on the new worker
    assert set(case.kinds) == {"duplicate_effect", "key_changed"}, case.text()
