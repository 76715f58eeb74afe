"""A chaos job keeps each run's case, but a clean one past the first ``FULL_CLEAN_CASES`` (by
run index, whatever order the workers finish in) without its ledger and traces (issue 23): the
job's memory per run no longer holds a ledger; failing runs are always kept in full."""

from __future__ import annotations

import random

from killdrill.chaos.report import CleanCases, RunRecord, report_dict
from killdrill.records import (
    Attempt,
    Call,
    CaseResult,
    CatalogueEntry,
    Discovery,
    LedgerSnapshot,
    TraceEvent,
    Violation,
)

LEDGER = LedgerSnapshot(calls=(Call(0, "payments", "charge", "k", {"n": 1}, "created", None, 1, 1, 0.0),))
TRACE = (TraceEvent("before:pay", 1, 0.0, 1),)


def case(i: int, bad: bool) -> CaseResult:
    violations = (Violation("duplicate_effect", "twice", "payments", "charge"),) if bad else ()
    attempts = (Attempt(1, "before:pay", "killed", -9, 1.0, TRACE, killed_at="before:pay"),)
    return CaseResult(("agent",), "before:pay", f"t{i}", f"/w/{i}", attempts, violations, ledger=LEDGER)


def test_the_smallest_indexes_stay_full_in_any_order_and_failures_always() -> None:
    order = list(range(50))
    random.Random(7).shuffle(order)  # workers finish out of order
    kept: dict[int, tuple[RunRecord, CaseResult]] = {}
    keeper = CleanCases(keep=10)
    for i in order:
        c = case(i, bad=i % 9 == 4)
        rec = RunRecord.of(i, c, 0.1)
        kept[i] = (rec, keeper.offer(rec, c, kept))
    good = [i for i in sorted(kept) if kept[i][0].outcome == "clean"]
    assert [i for i in good if not kept[i][1].abridged] == good[:10]
    for i in good[10:]:
        c = kept[i][1]
        assert c.ledger is None and all(a.trace == () for a in c.attempts) and c.summary == {}
    assert all(kept[i][1].ledger for i in kept if kept[i][0].outcome == "violated")
    disc = Discovery(("agent",), (CatalogueEntry("before:pay", "before:pay", 1, 0.0),), LEDGER)
    data = report_dict({}, disc, [kept[i][0] for i in sorted(kept)], [kept[i][1] for i in sorted(kept)], [])
    flagged = [c.get("abridged", False) for c in data["cases"]]
    assert flagged.count(True) == len(good) - 10
    assert [CaseResult.from_dict(c).abridged for c in data["cases"]] == flagged
