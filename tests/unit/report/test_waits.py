"""The runtime's dominant wait, said in one line when it took at least a quarter of the cases' time."""

from __future__ import annotations

from typing import Any

from killdrill.records import CaseResult
from killdrill.report.drill import render_cases, summarize_cases
from killdrill.report.waits import WAIT_SHARE, waits_line

LABEL = "the runtime's start_to_close_timeout (3 s) of activity charge"


def case(phases: dict[str, float], *waits: tuple[str, float]) -> CaseResult:
    listed: list[dict[str, Any]] = [{"label": label, "seconds": s} for label, s in waits]
    return CaseResult(
        command=("agent",),
        schedule="before:charge",
        thread="t",
        workdir="w",
        phases=phases,
        waits=tuple(listed),
    )


def test_a_wait_that_took_most_of_the_time_is_named_with_its_share() -> None:
    cases = [
        case({"readiness": 1.0, "resume": 4.0}, (LABEL, 3.0)),
        case({"resume": 5.0}, (LABEL, 3.2), ("other", 0.5)),
    ]
    line = waits_line(cases)
    assert line == f"cases waited 62% of their time (6.2 s of 10.0 s) on {LABEL} after a kill"
    text = render_cases(cases).splitlines()
    assert text[-2] == line and text[-1].startswith("2 cases: 2 exactly-once")
    assert summarize_cases(cases)["waited"]["label"] == LABEL


def test_no_line_for_a_fast_drill_or_a_small_wait() -> None:
    assert waits_line([case({"run": 0.3, "resume": 0.2})]) is None
    small = WAIT_SHARE * 10 - 0.1
    assert waits_line([case({"resume": 10.0}, (LABEL, small))]) is None
    assert "waited" not in summarize_cases([case({"resume": 1.0})])


def test_the_drills_discovery_is_not_a_cases_time() -> None:
    # 3 s of a 5 s case: named, though the first case also paid the drill's 20 s of clean runs
    line = waits_line([case({"discovery": 20.0, "resume": 5.0}, (LABEL, 3.0))])
    assert line is not None and "60%" in line


def test_phases_and_waits_round_trip_through_json() -> None:
    c = case({"setup": 0.01, "resume": 2.0}, (LABEL, 1.5))
    back = CaseResult.from_dict(c.to_dict())
    assert back.phases == c.phases and back.waits == c.waits


def test_the_line_says_why_a_wait_stays_and_what_the_integration_removed() -> None:
    said = {"label": LABEL, "seconds": 3.0, "kept": "the agent's own setting", "removed": ["a poll", "a q"]}
    c = CaseResult(command=("agent",), schedule="before:charge", thread="t", workdir="w",
                   phases={"resume": 4.0}, waits=(said,))  # fmt: skip
    assert waits_line([c]) == (
        f"cases waited 75% of their time (3.0 s of 4.0 s) on {LABEL} after a kill: the agent's own"
        " setting (killdrill already removed a poll; a q)"
    )
