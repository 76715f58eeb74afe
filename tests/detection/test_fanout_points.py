"""A kill at a ``Send`` fan-out's ``committed:pay#N`` is one state, whatever the load.

    pytest -m slow tests/detection/test_fanout_points.py -n 2

Three branches pay in parallel, each after a random latency.  ``committed:pay#N`` means: every
branch ran (its charge made), exactly N of them saved their writes.  So the planted uuid-key bug
(``send_payouts_uuid_key``) pays the 3 - N unsaved branches again on resume, every time, and the
correct agent is exactly-once, every time.  Without the integration's ordering, whether the other
branches had charged before the first branch's save depended on thread timing, and with it whether
the reproduction line showed the duplicate.
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.records import CaseResult
from tests.detection.corpus import SHAPE_CORRECT, SHAPE_DEFECTS, Agent, langgraph_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not langgraph_available(), reason="langgraph is not installed"),
]
REPEAT = int(os.environ.get("KILLDRILL_FANOUT_REPEAT", "4"))
POINTS = ("committed:pay", "committed:pay#2")


def _agent(name: str) -> Agent:
    return next(a for a in (*SHAPE_CORRECT, *SHAPE_DEFECTS) if a.name == name)


def _cases(agent: Agent, root: Path) -> list[CaseResult]:
    with Drill(agent.command, DrillOptions(root=root, workers=2, **agent.options)) as drill:
        drill.discover()
        with ThreadPoolExecutor(2) as pool:
            return list(pool.map(drill.run_case, [p for _ in range(REPEAT) for p in POINTS]))


def _paid(case: CaseResult) -> Counter[tuple[int, str]]:
    """(attempt, account) -> charges created, from the case's ledger."""
    assert case.ledger is not None
    return Counter(
        (c.attempt, c.payload["account"])
        for c in case.ledger.calls
        if (c.provider, c.op, c.outcome) == ("payments", "charge", "created")
    )


def test_uuid_key_is_paid_again_for_every_unsaved_branch(tmp_path: Path) -> None:
    wrong = []
    for case in _cases(_agent("send_payouts_uuid_key"), tmp_path):
        saved = 2 if case.schedule.endswith("#2") else 1
        paid = _paid(case)
        first = sum(n for (attempt, _), n in paid.items() if attempt == 1)
        again = sum(n for (attempt, _), n in paid.items() if attempt > 1)
        killed = case.attempts[0].killed_at if case.attempts else None
        if (killed, first, again) != (case.schedule, 3, 3 - saved) or "duplicate_effect" not in case.kinds:
            wrong.append(f"{case.schedule}: killed at {killed}, paid {first} then {again}, {case.kinds}")
    assert not wrong, "\n".join(wrong)


def test_correct_fan_out_is_exactly_once_at_every_save(tmp_path: Path) -> None:
    cases = _cases(_agent("send_payouts"), tmp_path)
    wrong = [f"{c.schedule}: {c.kinds} {c.workdir}" for c in cases if not c.ok or not c.attempts[0].killed_at]
    assert not wrong, "\n".join(wrong)
    assert all(sum(_paid(c).values()) == 3 for c in cases)
