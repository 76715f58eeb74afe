"""A request re-sent after a kill and started under a new run id (a client's retry of a
non-idempotent ``POST``): its effects are named ``work_resubmitted`` from the calls' runtime
context (the run each call belongs to) and the attempts, never ``unexplained``."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from killdrill.records import (
    CREATED,
    DRAINED,
    EXITED,
    KILLED,
    UNEXPECTED_EFFECT,
    Attempt,
    Call,
    LedgerSnapshot,
)
from killdrill.verdict import judge
from killdrill.verdict.diagnosis import FIXES, CauseName, diagnose

_seq = itertools.count(1)
W0, W1, W2 = "wf-clean", "wf-first", "wf-again"


def step(name: str, run: str, attempt: int, op: str, payload: dict[str, Any], eid: str) -> Call:
    provider = "mailbox" if op == "send" else "kv"
    ctx = {"runtime": "dbos", "unit": "step", "name": name, "run": run}
    return Call(next(_seq), provider, op, None, payload, CREATED, eid, attempt, 100 + attempt, 0.0, ctx)


def order(n: int, run: str, attempt: int) -> list[Call]:
    mail = {"to": "ada@example.com", "subject": f"Order {n}", "ref": f"order-{n}-confirmation"}
    return [
        step("insert_order", run, attempt, "set", {"key": f"orders/{n}", "value": "widget"}, f"orders/{n}"),
        step("send_order_notification", run, attempt, "send", mail, f"msg_000{n}"),
        step("update_status", run, attempt, "set", {"key": f"orders/{n}/status", "value": "SENT"}, f"s{n}"),
    ]


DRIVER = Attempt(1, None, EXITED, 0, 1.0, process="driver")
KILLED_APP = Attempt(
    2, "app:during:mailbox.send", KILLED, -9, 1.0, killed_at="during:mailbox.send", process="app"
)
RESTARTED = Attempt(3, None, DRAINED, -15, 1.0, process="app")


def diagnosed(case_runs: list[tuple[int, str, int]], *, late_first_update: bool = False) -> list[Any]:
    base = LedgerSnapshot(tuple(order(1, W0, 2)))
    calls = [c for n, run, attempt in case_runs for c in order(n, run, attempt)]
    if late_first_update:  # the recovered first run marks its order after the new run's steps
        calls.append(calls.pop(2))
    case = LedgerSnapshot(tuple(calls))
    attempts = [DRIVER, KILLED_APP, RESTARTED]
    return diagnose(judge(base, case, attempts), baseline=base, attempts=attempts, ledger=case)


@pytest.mark.parametrize("late", [False, True], ids=["in_order", "first_run_finishes_last"])
def test_a_second_order_from_a_re_sent_request_is_work_resubmitted(late: bool) -> None:
    out = diagnosed([(1, W1, 2), (2, W2, 3)], late_first_update=late)
    mail = next(v for v in out if v.provider == "mailbox")
    assert mail.kind == UNEXPECTED_EFFECT
    assert mail.cause == CauseName.WORK_RESUBMITTED and mail.fix == FIXES[CauseName.WORK_RESUBMITTED]
    assert f"in run {W2} (attempt 3, app)" in mail.observed
    assert "in 2 runs" in mail.observed and "a clean run has 1" in mail.observed
    assert "after the kill at during:mailbox.send (attempt 2, app)" in mail.observed
    assert "the driver ran once (attempt 1)" in mail.observed
    assert not [v for v in out if v.cause == CauseName.UNEXPLAINED], [(v.kind, v.cause) for v in out]
    for v in out:  # the new run is the one that began second, whatever step it reached first
        assert f"in run {W2} (attempt 3, app)" in v.observed, v.observed
        assert "this run is new (its first call: attempt 3, app)" in v.observed, v.observed


def test_one_run_doing_the_work_again_is_not_a_resubmission() -> None:
    # the same run (a recovered workflow) sending order 2 is not the work submitted again
    out = diagnosed([(1, W1, 2), (2, W1, 3)])
    assert out and not [v for v in out if v.cause == CauseName.WORK_RESUBMITTED]
