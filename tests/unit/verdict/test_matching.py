"""Matching calls by content: parallel order is never mistaken for volatility."""

from __future__ import annotations

import itertools
import random
from typing import Any

from killdrill.records import (
    CREATED,
    DUPLICATE_EFFECT,
    EXITED,
    KEY_CHANGED,
    KEY_REUSED,
    KILLED,
    MISSING_EFFECT,
    PER_THREAD_BASELINE,
    REJECTED,
    REPLAYED,
    Attempt,
    Call,
    CatalogueEntry,
    CleanRun,
    Discovery,
    LedgerSnapshot,
)
from killdrill.verdict import EffectNaming, judge, volatile_fields
from killdrill.verdict.baselines import ledger_break, repeated_calls, workload_difference
from killdrill.verdict.matching import assignment
from killdrill.verdict.matching_scale import match_calls

PAYEES = {"acct_alice": 1200, "acct_bob": 3400, "acct_carol": 560}
ATTEMPTS = (Attempt(1, "during:payments.charge#2", KILLED, -9, 10.0), Attempt(2, None, EXITED, 0, 10.0))


def ledger(*calls: tuple[str, str | None, dict[str, Any], str, int]) -> LedgerSnapshot:
    """Calls as (op, key, payload, outcome, attempt), sequence numbers in the order given."""
    return LedgerSnapshot(
        calls=tuple(
            Call(
                i,
                "payments",
                op,
                key,
                payload,
                outcome,
                f"ch_{i}" if outcome == CREATED else None,
                att,
                1,
                0.0,
            )
            for i, (op, key, payload, outcome, att) in enumerate(calls, 1)
        )
    )


def payout(account: str, *, key: str | None = None, outcome: str = CREATED, attempt: int = 1, **extra: Any):
    return (
        "charge",
        key or f"{{thread}}:payout:{account}",
        {"account": account, "amount": PAYEES[account], **extra},
        outcome,
        attempt,
    )


def test_assignment_is_a_minimum_over_every_pairing() -> None:
    rng = random.Random(11)
    for _ in range(200):
        n, m = rng.randint(1, 5), rng.randint(1, 5)
        cost = [[rng.randint(0, 9) for _ in range(m)] for _ in range(n)]
        pairs = assignment(cost)
        k = min(n, m)
        best = min(
            sum(cost[i][j] for i, j in zip(rows, cols, strict=True))
            for rows in itertools.permutations(range(n), k)
            for cols in itertools.permutations(range(m), k)
        )
        assert len(pairs) == k and sum(cost[i][j] for i, j in pairs) == best


def test_parallel_order_is_not_volatile_but_a_timestamp_is() -> None:
    """Two clean runs of a Send fan-out land the three payees in different orders."""
    a = ledger(*(payout(p, sent_at=1.0 + i) for i, p in enumerate(["acct_alice", "acct_bob", "acct_carol"])))
    b = ledger(*(payout(p, sent_at=9.0 + i) for i, p in enumerate(["acct_carol", "acct_alice", "acct_bob"])))
    assert volatile_fields(a, b) == {"payments.charge": ["sent_at"]}
    pairs = match_calls(a.calls, b.calls)
    assert sorted((x.payload["account"], y.payload["account"]) for x, y in pairs) == [
        ("acct_alice", "acct_alice"),
        ("acct_bob", "acct_bob"),
        ("acct_carol", "acct_carol"),
    ]


def test_one_payee_twice_and_one_never_is_caught_whatever_the_order() -> None:
    """B paid twice and C never, in another order than the baseline's: a violation, not a field
    that varies between runs."""
    a = ledger(*(payout(p) for p in ["acct_alice", "acct_bob", "acct_carol"]))
    b = ledger(*(payout(p) for p in ["acct_bob", "acct_carol", "acct_alice"]))
    volatile = volatile_fields(a, b)
    assert volatile == {}
    case = ledger(
        payout("acct_alice", key="{thread}:payout:0"),
        payout("acct_bob", key="{thread}:payout:1"),
        payout("acct_bob", key="{thread}:payout:2", attempt=2),
    )
    found = judge(a, case, ATTEMPTS, naming=EffectNaming(volatile=volatile))
    by_kind = {v.kind: v for v in found}
    assert {DUPLICATE_EFFECT, MISSING_EFFECT, KEY_CHANGED} <= set(by_kind)
    assert by_kind[DUPLICATE_EFFECT].identity == {"account": "acct_bob", "amount": 3400}
    assert by_kind[MISSING_EFFECT].identity == {"account": "acct_carol", "amount": 560}


def test_one_key_for_two_payees_is_key_reused() -> None:
    a = ledger(*(payout(p) for p in ["acct_alice", "acct_bob", "acct_carol"]))
    b = ledger(*(payout(p) for p in ["acct_carol", "acct_bob", "acct_alice"]))
    case = ledger(
        payout("acct_alice", key="k0"),
        payout("acct_bob", key="k1"),
        payout("acct_carol", key="k1", outcome=REJECTED, attempt=2),
    )
    kinds = [v.kind for v in judge(a, case, ATTEMPTS, naming=EffectNaming(volatile=volatile_fields(a, b)))]
    assert KEY_REUSED in kinds and MISSING_EFFECT in kinds


def test_three_parallel_payouts_replayed_in_another_order_are_clean() -> None:
    a = ledger(*(payout(p) for p in ["acct_alice", "acct_bob", "acct_carol"]))
    b = ledger(*(payout(p) for p in ["acct_bob", "acct_alice", "acct_carol"]))
    case = ledger(
        payout("acct_carol"),
        payout("acct_alice"),
        payout("acct_alice", outcome=REPLAYED, attempt=2),
        payout("acct_bob", attempt=2),
    )
    assert judge(a, case, ATTEMPTS, naming=EffectNaming(volatile=volatile_fields(a, b))) == []


def test_workload_difference_names_counts_and_points() -> None:
    one = ledger(payout("acct_alice"))
    two = ledger(payout("acct_alice"), payout("acct_bob"))
    assert workload_difference(["before:a"], one, ["before:a"], one) == ""
    text = workload_difference(["before:a"], one, ["before:a", "before:b"], two)
    assert "payments.charge landed 1 vs 2 times" in text and "only the second reached before:b" in text


def test_ledger_break_sees_lost_calls_and_a_missing_marker() -> None:
    before = ledger(payout("acct_alice"))
    assert ledger_break(before, ledger(payout("acct_alice"), payout("acct_bob")), True) == ""
    assert "gone" in ledger_break(before, ledger(), True)
    recreated = ledger(payout("acct_bob", attempt=2))  # seq 1 again, another call
    assert "gone" in ledger_break(before, recreated, True)
    assert "marker" in ledger_break(None, ledger(), False)


def test_repeated_calls_are_those_an_earlier_attempt_made() -> None:
    snap = ledger(
        payout("acct_alice"), payout("acct_alice", outcome=REPLAYED, attempt=2), payout("acct_bob", attempt=2)
    )
    assert [c.payload["account"] for c in repeated_calls(snap, 2)] == ["acct_alice"]


def test_per_thread_discovery_round_trips_and_picks_the_run_that_reached_a_point() -> None:
    entry = CatalogueEntry("before:b", "before:b", 1, 1.0)
    runs = (
        CleanRun("t1", (CatalogueEntry("before:a", "before:a", 1, 1.0),), ledger(payout("acct_alice"))),
        CleanRun("t2", (CatalogueEntry("before:a", "before:a", 1, 1.0), entry), ledger()),
    )
    d = Discovery(
        ("x",), runs[0].catalogue, runs[0].baseline, mode=PER_THREAD_BASELINE, mode_reason="r", runs=runs
    )
    back = Discovery.from_dict(d.to_dict())
    assert back == d
    assert back.labels() == ["before:a", "before:b"]
    assert back.run_for("before:b").thread == "t2" and back.run_for("before:a").thread == "t1"
    assert back.run_for(None).thread == "t1"
