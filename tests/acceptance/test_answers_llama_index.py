"""``--answer`` on LlamaIndex Workflows: a step waiting in ``ctx.wait_for_event`` is sent each answer
as a ``HumanResponseEvent`` through the handler, killed and resumed from the saved context for real.

The review agent (``tests/agents/basic/review_llama_index.py``) waits twice for a person: the
amount it charges, then the note it files.  Its driver's person is ``input()``: a drill reaches it
only if the scripted human left a wait unanswered.  Each case's ledger says which answer reached
which wait after the kill: a resumed context's pending wait is never published again, and an answer
handed out by a counter in the process would give it the first answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.drill.errors import DiscoveryError
from killdrill.integrations.llama_index.answers import pending_waits
from killdrill.records import CaseResult
from tests.frameworks import need

need("llama-index", "workflows")

AGENT = str(Path(__file__).parents[1] / "agents" / "basic" / "review_llama_index.py")
REVIEW = ["python", AGENT, "--thread", "{thread}", "--workdir", "{workdir}"]
ANSWERS = ("4200", '"ship it"')
FORK: dict[str, Any] = {"launcher": "fork", "preload": ("workflows", "workflows.runtime.types.step_function")}
BASELINE = [
    ("payments.charge", {"order": "A-17", "amount": 4200}),
    ("tickets.create", {"order": "A-17", "note": "ship it"}),
]


def drill(tmp_path: Path, command: list[str], **options: Any) -> Drill:
    base = DrillOptions(root=tmp_path, integrations=("llama_index",), timeout=60, discovery_runs=1, **FORK)
    return Drill(command, base, **options)


def effects(result: CaseResult) -> list[tuple[str, dict[str, Any]]]:
    """The calls that did something, in order (a replay under the same key is left out)."""
    assert result.ledger is not None
    return [(f"{c.provider}.{c.op}", dict(c.payload)) for c in result.ledger.calls if not c.replayed]


@pytest.mark.slow
def test_each_wait_gets_its_answer_in_order_across_kills(tmp_path: Path) -> None:
    with drill(tmp_path, REVIEW, answer=ANSWERS) as d:
        assert [(f"{c.provider}.{c.op}", c.payload) for c in d.discover().baseline.calls] == BASELINE
        # committed:checkpoint: saved after the charge, the note's wait still ahead; before:ask_note#2:
        # the note's answer handed over, not saved (the resumed context waits for it again).
        for schedule in ("committed:checkpoint", "before:ask_note#2", "during:tickets.create"):
            result = d.run_case(schedule)
            assert result.ok, result.text()
            assert result.attempts[0].killed_at == schedule
            assert effects(result) == BASELINE, result.text()


@pytest.mark.slow
def test_an_unkeyed_charge_after_the_answer_is_caught(tmp_path: Path) -> None:
    with drill(tmp_path, [*REVIEW, "--naive"], answer=ANSWERS) as d:
        result = d.run_case("after:charge")
    assert result.kinds == ("duplicate_effect",), result.text()


def test_a_wait_with_no_answer_left_reaches_the_drivers_prompt(tmp_path: Path) -> None:
    with drill(tmp_path, REVIEW, answer=ANSWERS[:1]) as d, pytest.raises(DiscoveryError) as err:
        d.discover()
    text = str(err.value)
    assert "1 wait(s) for workflows.events.HumanResponseEvent with no --answer left (1 given)" in text, text
    assert "EOFError" in text  # the driver's input() met no person


def test_pending_waits_reads_a_snapshot() -> None:
    human = "workflows.events.HumanResponseEvent"
    waiter = {"waiter_id": "w1", "waiting_for_event": human, "resolved_event": None}
    done = {**waiter, "waiter_id": "w0", "resolved_event": "{}"}
    snapshot = {"workers": {"ask": {"collected_waiters": [done, waiter]}, "other": {"collected_waiters": []}}}
    assert pending_waits(snapshot) == [("w1", human)]
