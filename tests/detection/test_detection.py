"""CI-sized detection check: each defect caught at its point, each correct agent clean at its points.

The full table (every point, chaos runs, 100 drills of the correct agents) is
``python -m tests.detection``; this runs one case per defect and a few per correct agent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from tests.detection.corpus import (
    CORRECT,
    DEFECTS,
    FORK_PRELOAD,
    Agent,
    langgraph_available,
)
from tests.detection.run import catches, false_alarm
from tests.frameworks import need


def _drill(agent: Agent, root: Path) -> Drill:
    # Forked attempts (a warm template, LangGraph imported once): the verdict of a case does not
    # depend on how its attempts start.  The table (python -m tests.detection) spawns them.
    for module, extra in agent.needs:  # skipped where not installed, failed where CI requires it
        need(extra, module)
    options = {"preload": FORK_PRELOAD.get(agent.name.split()[0], ()), **agent.options}
    return Drill(agent.command, DrillOptions(root=root, launcher="fork", **options))


# The two settlement examples are drilled at every point per push by test_settlement_drill.py and
# test_langgraph.py; here they run under -m slow only.
# The framework examples' correct forms are drilled by their own acceptance tests
# (tests/acceptance/test_{dbos,temporal,openai_agents,llama_index,crewai}.py).
_COVERED_ELSEWHERE = {
    "settlement",
    "settlement_langgraph",
    "payout_dbos",
    "payout_temporal",
    "billing_openai_agents",
    "ticket_llama_index",
    "onboarding_crewai",
    "pydantic_ai_dbos",
    "temporal_receipt",  # ~15 s per case (a resumed worker waits out the dead one's task timeout)
    "temporal_receipt_attempt_key",  # drilled per push by tests/acceptance/test_temporal.py
}


# The bundled framework examples' planted bugs are drilled per push by their own acceptance tests
# (tests/acceptance/test_{dbos,temporal,openai_agents,llama_index,pydantic_ai}.py; CrewAI's in its
# venv): here they run under -m slow, as the corpus table runs them all.
_FRAMEWORK_EXAMPLES = _COVERED_ELSEWHERE - {"settlement", "settlement_langgraph"}


def _defect_params() -> list[object]:
    out: list[object] = []
    for a in DEFECTS:
        marks = [pytest.mark.xfail(strict=True, reason=f"finding: {a.known_miss}")] if a.known_miss else []
        if a.name.split()[0] in _FRAMEWORK_EXAMPLES:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(a, id=a.name, marks=marks))
    return out


@pytest.mark.parametrize("agent", _defect_params())
def test_defect_is_caught_at_its_point(agent: Agent, tmp_path: Path) -> None:
    if "langgraph" in agent.options.get("integrations", ()) and not langgraph_available():
        pytest.skip("langgraph is not installed")
    with _drill(agent, tmp_path) as drill:
        assert agent.catch[0] in drill.points(), f"{agent.catch[0]} not in {drill.points()}"
        case = drill.run_case(agent.catch[0])
    assert case.attempts[0].killed_at == agent.catch[0], case.text()
    assert catches(agent, case), f"{agent.name}: expected {agent.expect}, got {case.kinds}\n{case.text()}"


@pytest.mark.parametrize(
    "agent",
    [
        pytest.param(
            a,
            id=a.name.split()[0],
            marks=[pytest.mark.slow] if a.name.split()[0] in _COVERED_ELSEWHERE else [],
        )
        for a in CORRECT
    ],
)
def test_correct_agent_has_no_false_alarm(agent: Agent, tmp_path: Path) -> None:
    if "langgraph" in agent.options.get("integrations", ()) and not langgraph_available():
        pytest.skip("langgraph or killdrill.examples.settlement_langgraph is not installed")
    with _drill(agent, tmp_path) as drill:
        for point in agent.catch:
            case = drill.run_case(point)
            assert case.attempts[0].killed_at == point, case.text()
            assert not false_alarm(case), case.text()
            assert case.ok, case.text()


def test_corpus_shape() -> None:
    """At least 15 defects, one named kind or a stated finding each; at least 5 correct agents."""
    from killdrill.records import VIOLATION_KINDS

    assert len(DEFECTS) >= 15 and len(CORRECT) >= 5
    assert len({a.name for a in DEFECTS + CORRECT}) == len(DEFECTS) + len(CORRECT)
    for a in DEFECTS:
        assert set(a.expect) <= set(VIOLATION_KINDS) and (a.expect or a.known_miss), a.name
        assert a.catch, a.name
