"""The clean run of a case's own thread as a yardstick, on the ledgers of a real misjudged case.

A Temporal agent in the documented style (charge then a receipt naming the charge's id), the
charge keyed by ``activity.info().attempt``, its client connected to a server the user runs (not
the drill's): the case, killed at ``during:payments.charge``, charged twice and sent the receipt
naming the second charge.  Its receipt differs from the shared baseline's, so the drill ran a
clean run of the case's own thread, and that run found the case's workflow closed on the user's
server (one namespace for every run): it attached and landed nothing.  Judged against it, both
charges and the receipt were ``unexpected_effect``, cause ``unexplained``.
"""

from __future__ import annotations

from typing import Any

from killdrill.records import (
    CREATED,
    DUPLICATE_EFFECT,
    EXITED,
    KEY_CHANGED,
    KILLED,
    UNEXPECTED_EFFECT,
    Attempt,
    Call,
    LedgerSnapshot,
)
from killdrill.verdict import judge
from killdrill.verdict.baselines import found_done
from killdrill.verdict.diagnosis import diagnose

CHARGE = {"amount": 4200, "currency": "usd", "customer": "cus_acme"}
ATTEMPTS = [
    Attempt(1, "during:payments.charge", KILLED, -9, 2.5, killed_at="during:payments.charge"),
    Attempt(2, None, EXITED, 0, 14.3),
]


def _ctx(name: str, attempt: int, activity: str) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "id": activity,
        "name": name,
        "run": "{thread}",
        "runtime": "temporal",
        "unit": "activity",
    }


def _charge(seq: int, attempt: int, eid: str) -> Call:
    key = f"{{thread}}:charge:{attempt}"
    return Call(
        seq,
        "payments",
        "charge",
        key,
        CHARGE,
        CREATED,
        eid,
        attempt,
        100,
        0.0,
        context=_ctx("charge", attempt, "1"),
    )


def _receipt(seq: int, attempt: int, charge_id: str) -> Call:
    payload = {
        "body": f"We charged 42.00 USD ({charge_id}).",
        "ref": "{thread}:receipt",
        "subject": "Your receipt",
        "to": "billing@acme.example",
    }
    return Call(
        seq,
        "mailbox",
        "send",
        None,
        payload,
        CREATED,
        "msg_0001",
        attempt,
        100,
        0.0,
        context=_ctx("send_receipt", 1, "2"),
    )


SHARED = LedgerSnapshot((_charge(1, 1, "ch_0001"), _receipt(2, 1, "ch_0001")))
CASE = LedgerSnapshot((_charge(1, 1, "ch_0001"), _charge(2, 2, "ch_0002"), _receipt(3, 2, "ch_0002")))
ATTACHED = LedgerSnapshot(())  # the own thread's clean run: the workflow was closed, nothing ran


def test_judged_against_a_run_that_found_the_work_done_every_effect_reads_unexpected() -> None:
    """What the drill printed: the verdict is right about its yardstick, the yardstick is wrong."""
    out = diagnose(judge(ATTACHED, CASE, ATTEMPTS), baseline=ATTACHED, attempts=ATTEMPTS)
    assert [v.kind for v in out] == [UNEXPECTED_EFFECT, KEY_CHANGED, UNEXPECTED_EFFECT], out
    assert out[0].cause == "unexplained" and "(landed 2 times, baseline 0)" in out[1].message


def test_a_clean_run_that_found_the_threads_work_done_is_no_yardstick() -> None:
    why = found_done(SHARED, CASE, ATTACHED)
    assert "landed no effect" in why and "mailbox.send 1, payments.charge 2" in why, why
    assert "outside the workdir" in why
    # the shared baseline is the yardstick: one duplicate charge named from the runtime's attempt
    # number, the receipt naming the second charge its consequence
    out = diagnose(judge(SHARED, CASE, ATTEMPTS), baseline=SHARED, attempts=ATTEMPTS)
    assert [v.kind for v in out] == [DUPLICATE_EFFECT, KEY_CHANGED], out
    assert {v.cause for v in out} == {"key_new_per_attempt"}, out
    [receipt] = [k for k in out[0].consequences if k.kind == UNEXPECTED_EFFECT]
    assert receipt.provider == "mailbox" and "ch_0002" in receipt.message


def test_a_thread_whose_own_work_is_smaller_keeps_its_own_clean_run() -> None:
    """A thread that does less (one notification where the shared baseline's thread sends two)
    lands less in its case too: its own clean run is its yardstick, whatever it landed."""
    hook = {"event": "invoice.ready"}
    two = LedgerSnapshot(
        tuple(
            Call(
                i,
                "webhooks",
                "post",
                f"{{thread}}:notify:{i}",
                {**hook, "to": to},
                CREATED,
                f"wh_{i}",
                1,
                1,
                0.0,
            )
            for i, to in enumerate(("ops@acme.test", "cfo@acme.test"), start=1)
        )
    )
    one = LedgerSnapshot(two.calls[:1])
    assert found_done(two, one, one) == ""
    assert found_done(two, one, LedgerSnapshot(())) == ""  # the case did less: the thread's work
    assert found_done(LedgerSnapshot(()), CASE, ATTACHED) == ""  # nothing to find done
    assert found_done(SHARED, CASE, LedgerSnapshot(SHARED.calls[:1])) == ""  # it did some work
