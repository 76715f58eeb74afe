"""``--answer`` on Temporal: a workflow waiting in ``workflow.wait_condition`` for its reviewer's
signal gets each answer as that signal, on the drill's dev server, its worker killed for real.

The review agent (``tests/agents/basic/review_temporal.py``) waits twice on one signal: the amount
it charges, then the note it files.  Each case's ledger says which answer reached which wait after
the kill: an answer handed out by a counter in the process would give the resumed worker's second
wait the first answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.integrations.temporal.answers import signal_for
from killdrill.records import CaseResult
from tests.frameworks import need

need("temporal", "temporalio")

AGENT = str(Path(__file__).parents[1] / "agents" / "basic" / "review_temporal.py")
REVIEW = ["python", AGENT, "--thread", "{thread}"]
ANSWERS = ("4200", '"ship it"')
FORK: dict[str, Any] = {"launcher": "fork", "preload": ("temporalio.client", "temporalio.worker")}
BASELINE = [
    ("payments.charge", {"order": "A-17", "amount": 4200}),
    ("tickets.create", {"order": "A-17", "note": "ship it"}),
]


def drill(tmp_path: Path, command: list[str], **options: Any) -> Drill:
    base = DrillOptions(root=tmp_path, integrations=("temporal",), timeout=60, discovery_runs=1, **FORK)
    return Drill(command, base, **options)


def effects(result: CaseResult) -> list[tuple[str, dict[str, Any]]]:
    """The calls that did something, in order (a replay under the same key is left out)."""
    assert result.ledger is not None
    return [(f"{c.provider}.{c.op}", dict(c.payload)) for c in result.ledger.calls if not c.replayed]


@pytest.mark.slow
def test_each_wait_gets_its_signal_in_order_across_kills(tmp_path: Path) -> None:
    with drill(tmp_path, REVIEW, answer=ANSWERS) as d:
        assert [(f"{c.provider}.{c.op}", c.payload) for c in d.discover().baseline.calls] == BASELINE
        # before:charge: the first answer is in the history; the resumed worker replays that wait
        # and reaches the second one live.
        for schedule in ("before:charge", "committed:charge", "during:tickets.create"):
            result = d.run_case(schedule)
            assert result.ok, result.text()
            assert result.attempts[0].killed_at == schedule
            assert effects(result) == BASELINE, result.text()


@pytest.mark.slow
def test_an_unkeyed_charge_after_the_signal_is_caught(tmp_path: Path) -> None:
    with drill(tmp_path, [*REVIEW, "--naive"], answer=ANSWERS) as d:
        result = d.run_case("after:charge")
    assert "duplicate_effect" in result.kinds, result.text()


def test_an_answer_names_its_signal_when_the_workflow_has_several() -> None:
    assert signal_for(7, ["review"]) == ("review", [7])
    assert signal_for({"signal": "approve", "args": [True]}, ["approve", "reject"]) == ("approve", [True])
    with pytest.raises(ValueError, match="name one"):
        signal_for("yes", ["approve", "reject"])
