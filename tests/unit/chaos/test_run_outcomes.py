"""How a chaos run is counted: a landed pause or connection fault is a landed fault, not a miss
(``--faults kill,pause``: a run whose pause held the worker is not "no kill landed")."""

from __future__ import annotations

from killdrill.chaos.report import CLEAN, MISSED, RunRecord, chaos_counts, render_text
from killdrill.records import Attempt, AttemptOutcome, CaseResult, TraceEvent


def _case(schedule: str, *attempts: Attempt) -> CaseResult:
    return CaseResult(
        command=("agent",), schedule=schedule, thread="t", workdir="/nowhere", attempts=attempts
    )


def _exited(number: int, kill: str | None, *points: str, notes: tuple[str, ...] = ()) -> Attempt:
    trace = tuple(TraceEvent(p, 1, float(i), 100 + number) for i, p in enumerate(points))
    return Attempt(number, kill, AttemptOutcome.EXITED, 0, 10.0, trace=trace, notes=notes)


def test_a_landed_pause_is_a_landed_fault_not_a_miss() -> None:
    zombie = _exited(
        1,
        "pause:after:reserve",
        "before:reserve",
        "after:reserve",
        notes=("paused (SIGSTOP of its process tree) at after:reserve for 1000ms ...",),
    )
    case = _case("pause:after:reserve", zombie, _exited(2, None, "before:reserve", "after:reserve"))
    record = RunRecord.of(0, case, 1.0)
    assert (record.outcome, record.landed) == (CLEAN, ("after:reserve",))
    counts = chaos_counts([record])
    assert (counts["runs_clean"], counts["runs_without_kill"], counts["kills_landed"]) == (1, 0, 1)


def test_a_landed_drop_is_a_landed_fault() -> None:
    dropped = _exited(
        1, "drop:payments.charge", "before:pay", notes=("dropped the response of payments.charge",)
    )
    record = RunRecord.of(0, _case("drop:payments.charge", dropped), 1.0)
    assert (record.outcome, record.landed) == (CLEAN, ("during:payments.charge",))


def test_a_pause_never_reached_is_still_a_miss() -> None:
    never = Attempt(1, "pause:after:reserve", AttemptOutcome.POINT_NOT_REACHED, 0, 10.0)
    assert RunRecord.of(0, _case("pause:after:reserve", never), 1.0).outcome == MISSED


def test_render_text_names_faults_landed_not_only_kills() -> None:
    zombie = _exited(1, "pause:after:reserve", "after:reserve", notes=("paused (SIGSTOP ...",))
    record = RunRecord.of(0, _case("pause:after:reserve", zombie), 1.0)
    data = {
        "chaos": {"seed": 1, "shard": "1/1"},
        "summary": chaos_counts([record]),
        "runs": [record.to_dict()],
        "spread": {"after:reserve": {"aimed": 0, "kills": 1, "violated": 0}},
    }
    text = render_text(data)
    assert (
        "no kill landed" not in text
        and "1 faults landed" in text
        and "aimed  landed  in violated runs" in text
    )
