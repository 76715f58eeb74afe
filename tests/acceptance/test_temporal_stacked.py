"""Integrations stacked as users stack them: an OpenAI Agents SDK agent made durable with
Temporal's plugin (``temporalio.contrib.openai_agents``, in ``tests/agents/stacked``).  Temporal's
integration drills it (the model calls and the tool are activities), so no warning says the
Agents SDK's integration is off; with both integrations on, the SDK's points in the workflow are
emitted by real executions only, never once more per workflow replay."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.drill.setup_checks import SetupWarning
from tests.frameworks import need

need("temporal", "temporalio")
need("langgraph", "langgraph")
# Temporal's plugins are distributions of their own (temporalio.contrib.* forwards to them); CI runs
# this file in a venv of its own with the extra (.ci/run), where it is required
need("temporal-plugins", "temporalio.openai_agents", "temporalio.langgraph")

AGENT = Path(__file__).parent.parent / "agents" / "stacked" / "billing_agents_temporal.py"
SCRIPT = str(AGENT.with_suffix(".yaml"))


GRAPH = AGENT.with_name("billing_langgraph_temporal.py")


def drill(tmp_path: Path, *integrations: str, bug: str = "", agent: Path = AGENT) -> Drill:
    command = [sys.executable, str(agent), "--thread", "{thread}", *(["--bug", bug] if bug else [])]
    options = DrillOptions(
        root=tmp_path, integrations=integrations, model_script=SCRIPT, timeout=60, discovery_runs=1
    )
    return Drill(command, options)


def test_the_agents_sdk_inside_temporals_plugin_is_not_said_to_be_off(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as said, drill(tmp_path, "temporal") as d:
        warnings.simplefilter("always")
        points = d.points()
    off = [str(w.message) for w in said if issubclass(w.category, SetupWarning)]
    assert not off, off
    assert {"before:charge_card", "committed:charge_card", "before:invoke_model_activity"} <= set(points)


def test_the_stacked_sdk_counts_executions_not_workflow_replays(tmp_path: Path) -> None:
    with drill(tmp_path, "temporal", "openai_agents") as d:
        points = d.points()
    # the tool's call in the workflow (the SDK's before:) and its activity (Temporal's): two, however
    # many workflow tasks replayed the workflow after it (no sticky cache: every one does)
    assert [p for p in points if p.startswith("before:charge_card")] == [
        "before:charge_card",
        "before:charge_card#2",
    ]
    assert "before:charge_card#3" not in points and "after:charge_card#3" not in points


@pytest.mark.parametrize(("bug", "kinds"), [("", ()), ("uuid_key", ("duplicate_effect", "key_changed"))])
def test_a_charge_lost_with_its_worker_is_judged_by_its_key(
    tmp_path: Path, bug: str, kinds: tuple[str, ...]
) -> None:
    with drill(tmp_path, "temporal", "openai_agents", bug=bug) as d:
        case = d.run_case("after:charge_card")  # the activity charged; its completion never sent
    assert case.kinds == kinds, case.text()


def test_a_langgraph_graph_inside_temporals_plugin_is_drilled_once_per_node(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as said, drill(tmp_path / "a", "temporal", agent=GRAPH) as d:
        warnings.simplefilter("always")
        alone = d.points()
    assert not [w for w in said if issubclass(w.category, SetupWarning)], [str(w.message) for w in said]
    assert "before:billing.charge" in alone  # the node's activity
    with drill(tmp_path / "b", "temporal", "langgraph", agent=GRAPH) as d:
        both = d.points()
    # LangGraph's node points in the workflow, once each, however many workflow tasks replayed it
    assert [p for p in both if p.split(":")[1].split("#")[0] in ("charge", "receipt")] == [
        "before:charge",
        "after:charge",
        "before:receipt",
        "after:receipt",
    ]
