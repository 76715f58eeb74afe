"""A failed drill's text ends on its totals, the line the docs promise (``N cases: ...``),
not on the last failed case's reproduction line."""

from __future__ import annotations

from killdrill.chaos.report import render_text
from killdrill.records import DUPLICATE_EFFECT, CaseResult, Violation
from killdrill.report.drill import render_cases


def _case(schedule: str, *violations: Violation) -> CaseResult:
    return CaseResult(
        command=("agent",),
        schedule=schedule,
        thread="t",
        workdir="/nowhere",
        violations=violations,
        reproduce=f"killdrill run --schedule {schedule} -- agent",
    )


DUP = Violation(DUPLICATE_EFFECT, "payments.charge landed 2 times (baseline 1)")


def test_failed_cases_come_first_and_the_totals_last() -> None:
    text = render_cases([_case("before:a"), _case("during:payments.charge", DUP)])
    lines = text.splitlines()
    assert lines[-1] == "2 cases: 1 exactly-once, 1 violated (duplicate_effect x1)"
    assert text.index("killdrill run --schedule during:payments.charge") < text.index("Cases:")


def test_a_shrunk_failure_lists_its_messages_not_only_kinds() -> None:
    failure = {
        "schedule": "during:payments.charge",
        "kinds": [DUPLICATE_EFFECT],
        "original": "before:a+30%,during:payments.charge",
        "index": 3,
        "reproduce": "killdrill run --schedule during:payments.charge -- agent",
        "shrink_runs": 2,
        "case": _case("during:payments.charge", DUP).to_dict(),
    }
    data = {
        "chaos": {"seed": 1, "shard": "1/1"},
        "summary": {
            "runs": 1,
            "runs_clean": 0,
            "runs_violated": 1,
            "runs_without_kill": 0,
            "runs_harness_error": 0,
            "kills_landed": 1,
            "kills_missed": 0,
        },
        "runs": [],
        "spread": {"START": {"aimed": 0, "kills": 1, "violated": 1}},
        "failures": [failure],
    }
    assert "    duplicate_effect: payments.charge landed 2 times (baseline 1)" in render_text(data)
