"""The LangGraph order agent (ChatOpenAI + ToolNode; stripe, httpx, smtplib), drilled unmodified:
the model fake answers it, the wire fakes record its charge, webhook and receipt."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

# Found, not imported: the agents import them in their own processes (the SDKs take seconds to
# import, and every xdist worker collects this module).
_missing = [m for m in ("langchain_openai", "aiosmtpd", "httpx", "stripe", "yaml")
            if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(f"needs {', '.join(_missing)}", allow_module_level=True)

from killdrill.drill import Drill, DrillOptions  # noqa: E402
from killdrill.examples import ORDER_AGENT, ORDER_AGENT_ENV, ORDER_AGENT_PRELOAD, ORDER_AGENT_SCRIPT  # noqa: E402

# LangGraph's default durability is "async": the next step may start before the previous one's
# writes are saved.  A slow checkpointer makes that window certain, so a kill in the charge
# loses the model's tool call and the resume asks the model again.
SLOW_CHECKPOINTER = {"KILLDRILL_LANGGRAPH_CHECKPOINT_DELAY": "300ms"}


def drill(root: Path, *args: str, variance: int | None = None, env: dict[str, str] | None = None) -> Drill:
    options = DrillOptions(
        root=root,
        integrations=("langgraph",),
        smtp_fake=True,
        model_script=ORDER_AGENT_SCRIPT,
        model_variance=variance,
        env={**ORDER_AGENT_ENV, **(env or {})},
        launcher="fork",
        preload=ORDER_AGENT_PRELOAD,
        discovery_runs=1,
        timeout=60,
    )
    return Drill([*ORDER_AGENT, *args], options)


def _kinds(case: Any) -> set[tuple[str, str | None]]:
    return {(v.kind, v.provider) for v in case.violations}


@pytest.mark.parametrize("every", [pytest.param(True, marks=pytest.mark.slow), False], ids=["all", "sampled"])
def test_correct_agent_passes_every_point(tmp_path: Path, every: bool) -> None:
    """Per push: every ``during:`` point (where effects are cut) and every third of the others;
    under ``-m slow`` all of them (35 cases, the suite's single most expensive drill)."""
    with drill(tmp_path) as d:
        points = d.discover().labels()
        chosen = [p for i, p in enumerate(points) if every or p.startswith("during:") or i % 3 == 0]
        result = d.run_all(chosen)
    for effect in ("during:model.chat", "during:payments.charge", "during:hooks.post", "during:mailbox.send"):
        assert effect in points
    assert len(points) >= 30 and [c.schedule for c in result.cases] == chosen
    assert result.ok, result.text()
    base = {c.provider for c in d.discover().baseline.calls}
    assert base == {"model", "payments", "hooks", "mailbox"}
    # a kill between the model's answer and the checkpoint costs a model call again
    assert result.to_dict()["summary"]["model"]["respent_calls"] > 0
    assert any(c.model["respent_calls"] for c in result.cases if c.schedule.startswith("during:model.chat"))


def test_naive_receipt_is_sent_twice(tmp_path: Path) -> None:
    """The ungated smtplib send repeats whenever the tools step re-runs after the message went out.
    (The tool-call-id keys replay here: LangGraph saved the model's message before the tools ran.)"""
    with drill(tmp_path, "--naive") as d:
        for point in ("during:mailbox.send", "after:tools#2"):
            case = d.run_case(point)
            assert _kinds(case) == {("duplicate_effect", "mailbox")}, case.text()
        assert d.run_case("during:payments.charge").ok


@pytest.mark.slow  # per push, tests/acceptance/test_model_fake.py catches a tool-call-id key under variance
def test_variance_catches_a_tool_call_id_key_when_the_model_is_asked_again(tmp_path: Path) -> None:
    """With the model's tool call lost to the kill, the resume asks again.  A deterministic model
    repeats the tool-call id, so the naive key looks stable; with variance it changes (as a real
    model's would) and the card is charged twice.  Keys made of thread and order do not care."""
    point = "during:payments.charge"
    with drill(tmp_path / "plain", "--naive", env=SLOW_CHECKPOINTER) as d:
        case = d.run_case(point)
    assert case.ok and case.model["respent_calls"] >= 1, case.text()
    with drill(tmp_path / "naive", "--naive", variance=0, env=SLOW_CHECKPOINTER) as d:
        case = d.run_case(point)
    assert {("duplicate_effect", "payments"), ("key_changed", "payments")} <= _kinds(case), case.text()
    with drill(tmp_path / "correct", variance=0, env=SLOW_CHECKPOINTER) as d:
        case = d.run_case(point)
    assert case.ok and case.model["respent_calls"] >= 1, case.text()


@pytest.mark.slow
@pytest.mark.parametrize("repetition", range(20))
def test_twenty_times(tmp_path: Path, repetition: int) -> None:
    """20 repetitions: the correct agent passes every point under variance, every time; the naive
    one is caught every time at its receipt and, under variance with a slow checkpointer, its charge."""
    with drill(tmp_path / "correct", variance=repetition) as d:
        result = d.run_all()
        assert result.ok, result.text()
    with drill(tmp_path / "naive", "--naive") as d:
        for point in ("during:mailbox.send", "after:tools#2"):
            assert ("duplicate_effect", "mailbox") in _kinds(d.run_case(point))
    with drill(tmp_path / "naive-var", "--naive", variance=repetition, env=SLOW_CHECKPOINTER) as d:
        assert ("key_changed", "payments") in _kinds(d.run_case("during:payments.charge"))
