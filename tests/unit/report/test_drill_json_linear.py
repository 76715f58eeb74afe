"""A drill's JSON report is linear in its catalogue: each case of an N-step agent
holds N calls and N boundaries, so only failing cases and the first ``FULL_CLEAN_CASES`` clean
ones are kept in full; later clean ones are abridged (no ledger, no traces) and still render."""

from __future__ import annotations

import json

from killdrill.records import (
    FULL_CLEAN_CASES,
    Attempt,
    Call,
    CaseResult,
    CatalogueEntry,
    Discovery,
    DrillResult,
    LedgerSnapshot,
    TraceEvent,
    Violation,
)
from killdrill.report.drill import render_drill
from killdrill.report.drill_html import render_drill_html
from killdrill.report.jsonfile import dumps


def drill(n: int, bad_every: int = 7) -> DrillResult:
    labels = [f"before:step_{i:03d}" for i in range(n)]
    cat = tuple(CatalogueEntry(lb, lb, 1, float(i)) for i, lb in enumerate(labels))
    calls = tuple(
        Call(i, "payments", "charge", f"{{thread}}:{i}", {"n": i}, "created", None, 1, 1, 0.0)
        for i in range(n)
    )
    ledger = LedgerSnapshot(calls=calls)
    trace = tuple(TraceEvent(lb, 1, float(k), 1) for k, lb in enumerate(labels))
    cases = []
    for i, lb in enumerate(labels):
        bad = i % bad_every == 3
        violations = (Violation("duplicate_effect", "landed twice", "payments", "charge"),) if bad else ()
        attempts = (
            Attempt(1, lb, "killed", -9, 1.0, trace, killed_at=lb),
            Attempt(2, None, "exited", 0, 1.0, trace),
        )
        cases.append(CaseResult(("agent",), lb, f"t{i}", f"/w/{i}", attempts, violations, ledger=ledger))
    return DrillResult(Discovery(("agent",), cat, ledger), tuple(cases))


def test_clean_cases_past_the_bound_are_abridged_and_failing_ones_never() -> None:
    result = drill(FULL_CLEAN_CASES * 2)
    data = result.to_dict()
    clean = [c for c in data["cases"] if c["verdict"] == "exactly-once"]
    bad = [c for c in data["cases"] if c["verdict"] == "violated"]
    assert bad and all(c["ledger"] and c["attempts"][0]["trace"] and "abridged" not in c for c in bad)
    full, short = clean[:FULL_CLEAN_CASES], clean[FULL_CLEAN_CASES:]
    assert short and all(c["ledger"] and c["attempts"][0]["trace"] for c in full)
    assert all(c["abridged"] is True and c["ledger"] is None for c in short)
    assert all(a["trace"] == [] for c in short for a in c["attempts"])
    assert all(c["attempts"][0]["killed_at"] == c["schedule"] for c in short)
    # the summary is of every case, abridged or not; the page and the text still render
    assert data["summary"]["cases"] == len(result.cases)
    parsed = json.loads(dumps(data))
    assert "case(s) without a violation" in render_drill_html(parsed, ["agent"])
    assert render_drill(result)


def test_the_report_grows_linearly_past_the_bound() -> None:
    # one failing case (failing ones are always in full: the evidence)
    size = {
        n: len(dumps(drill(n, bad_every=n).to_dict())) for n in (2 * FULL_CLEAN_CASES, 8 * FULL_CLEAN_CASES)
    }
    per_case = {n: s / n for n, s in size.items()}
    # every case in full: 4x the points, 4x the bytes per case; linear: about the same per case
    assert per_case[8 * FULL_CLEAN_CASES] < 1.5 * per_case[2 * FULL_CLEAN_CASES], per_case
