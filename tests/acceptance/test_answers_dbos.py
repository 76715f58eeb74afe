"""``--answer`` on DBOS: a workflow waiting in ``DBOS.recv`` is sent each answer with ``DBOS.send``,
killed and recovered for real.

The inbox agent (``tests/agents/basic/inbox_dbos.py``) asks twice on one topic: the amount it
charges, then the note it files.  Each case's ledger says which answer reached which ``recv``
after the kill: an answer handed out by a counter in the process would give the recovered
workflow's second question the first answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.drill.errors import DiscoveryError
from killdrill.records import CaseResult
from tests.frameworks import need

need("dbos", "dbos")

AGENT = str(Path(__file__).parents[1] / "agents" / "basic" / "inbox_dbos.py")
INBOX = ["python", AGENT, "--thread", "{thread}", "--workdir", "{workdir}"]
ANSWERS = ("4200", '"ship it"')
FORK: dict[str, Any] = {"launcher": "fork", "preload": ("dbos", "sqlalchemy")}
BASELINE = [
    ("payments.charge", {"order": "A-17", "amount": 4200}),
    ("tickets.create", {"order": "A-17", "note": "ship it"}),
]


def drill(tmp_path: Path, command: list[str], **options: Any) -> Drill:
    base = DrillOptions(root=tmp_path, integrations=("dbos",), timeout=90, discovery_runs=1, **FORK)
    return Drill(command, base, **options)


def effects(result: CaseResult) -> list[tuple[str, dict[str, Any]]]:
    """The calls that did something, in order (a replay under the same key is left out)."""
    assert result.ledger is not None
    return [(f"{c.provider}.{c.op}", dict(c.payload)) for c in result.ledger.calls if not c.replayed]


@pytest.mark.slow
def test_each_recv_gets_its_answer_in_order_across_kills(tmp_path: Path) -> None:
    with drill(tmp_path, INBOX, answer=ANSWERS) as d:
        assert [(f"{c.provider}.{c.op}", c.payload) for c in d.discover().baseline.calls] == BASELINE
        # before:charge: the first recv recorded; the recovery replays it and the second recv is new.
        for schedule in ("before:charge", "committed:charge", "during:tickets.create"):
            result = d.run_case(schedule)
            assert result.ok, result.text()
            assert result.attempts[0].killed_at == schedule
            assert effects(result) == BASELINE, result.text()


@pytest.mark.slow
def test_async_recv_is_answered_too(tmp_path: Path) -> None:
    with drill(tmp_path, [*INBOX, "--async"], answer=ANSWERS) as d:
        result = d.run_case("before:charge_async")
        assert result.ok, result.text()
        assert effects(result) == BASELINE, result.text()


@pytest.mark.slow
def test_an_unkeyed_charge_after_the_answer_is_caught(tmp_path: Path) -> None:
    with drill(tmp_path, [*INBOX, "--naive"], answer=ANSWERS) as d:
        result = d.run_case("after:charge")
    assert result.kinds == ("duplicate_effect",), result.text()


def test_a_recv_with_no_answer_left_is_said(tmp_path: Path) -> None:
    """The second question has no answer: the workflow ends without its ticket, and the agent's
    stderr names the waiting recv."""
    command = [*INBOX, "--wait", "1"]
    with drill(tmp_path, command, answer=ANSWERS[:1]) as d, pytest.raises(DiscoveryError) as err:
        d.discover()
    assert "recv('approval')" in str(err.value) and "no --answer left (1 given)" in str(err.value)
