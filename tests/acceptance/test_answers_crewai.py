"""``--answer`` on CrewAI Flows: a ``@human_feedback`` method's console question gets each answer
as the reviewer's text, killed and resumed (``kickoff(inputs={"id": ...})``) for real.

The review agent (``tests/agents/basic/review_crewai.py``) asks twice: the amount it charges, then
the note it files.  CrewAI resumes a persisted flow by running every method again, so a resumed
run asks both questions again, in the same order: each must get the answer it got before the kill
(a process-local counter would too, since the order never changes; the answers' workdir record
is what keeps it when a resumed run asks fewer).  Slow: CrewAI's import is tens of seconds per
attempt.  Runs in CrewAI's own venv (``.venv-crewai``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.records import CaseResult
from tests.frameworks import need

need("crewai", "crewai")

AGENT = str(Path(__file__).parents[1] / "agents" / "basic" / "review_crewai.py")
REVIEW = ["python", AGENT, "--thread", "{thread}", "--workdir", "{workdir}"]
ANSWERS = ("4200", "ship it")
PRELOAD = ("crewai.flow.flow", "crewai.flow.persistence", "pyarrow.compute", "pyarrow.dataset")
BASELINE = [
    ("payments.charge", {"order": "A-17", "amount": 4200}),
    ("tickets.create", {"order": "A-17", "note": "ship it"}),
]


def drill(tmp_path: Path, command: list[str], **options: Any) -> Drill:
    fork: dict[str, Any] = {"launcher": "fork", "preload": PRELOAD}
    base = DrillOptions(root=tmp_path, integrations=("crewai",), timeout=300, discovery_runs=1, **fork)
    return Drill(command, base, **options)


def effects(result: CaseResult) -> list[tuple[str, dict[str, Any]]]:
    assert result.ledger is not None
    return [(f"{c.provider}.{c.op}", dict(c.payload)) for c in result.ledger.calls if not c.replayed]


@pytest.mark.slow
def test_each_feedback_gets_its_answer_across_kills_and_an_unkeyed_charge_is_caught(tmp_path: Path) -> None:
    with drill(tmp_path / "keyed", REVIEW, answer=ANSWERS) as d:
        assert [(f"{c.provider}.{c.op}", c.payload) for c in d.discover().baseline.calls] == BASELINE
        result = d.run_case("committed:propose_note")
        assert result.ok, result.text()
        assert effects(result) == BASELINE, result.text()
    with drill(tmp_path / "naive", [*REVIEW, "--naive"], answer=ANSWERS) as d:
        result = d.run_case("after:charge")
    assert result.kinds == ("duplicate_effect",), result.text()
