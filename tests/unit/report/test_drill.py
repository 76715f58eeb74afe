"""Reports rendered from constructed results: readable, complete, reproducible, valid JSON."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from killdrill.records import (
    CREATED,
    EXITED,
    HANG,
    KILLED,
    Attempt,
    AttemptOutcome,
    Call,
    CaseResult,
    CatalogueEntry,
    Discovery,
    DrillResult,
    LedgerSnapshot,
    Violation,
)
from killdrill.report.drill import (
    drill_json,
    render_case,
    render_catalogue,
    render_drill,
    summarize_cases,
    write_json,
)
from killdrill.verdict import judge, summarize

COMMAND = ("python", "-m", "killdrill.examples.settlement", "--thread", "{thread}", "--db", "{workdir}/c.db")
CHARGE = {"account_id": "acme", "amount": 4200}
REPRO = "killdrill run --schedule during:payments.charge -- python -m killdrill.examples.settlement"
PYTEST_REPRO = "pytest 'tests/test_agent.py::test_exactly_once' --killdrill-point=during:payments.charge"


def charge(seq: int, key: str, attempt: int) -> Call:
    return Call(
        seq, "payments", "charge", key, dict(CHARGE), CREATED, f"ch_{seq}", attempt, 100 + attempt, 0.0
    )


BASELINE = LedgerSnapshot(calls=(charge(1, "b1", 1),))
CATALOGUE = (
    CatalogueEntry("before:charge_customer", "before:charge_customer", 1, 3.25),
    CatalogueEntry("during:payments.charge", "during:payments.charge", 1, 4.5),
    CatalogueEntry("before:send_receipt", "before:send_receipt", 1, 6.0),
    CatalogueEntry("before:send_receipt#2", "before:send_receipt", 2, 7.75),
)
DISCOVERY = Discovery(
    command=COMMAND,
    catalogue=CATALOGUE,
    baseline=BASELINE,
    volatile={"payments.charge": ["description"]},
    duration_ms=120.0,
)


def duplicated_case(**over: object) -> CaseResult:
    """The classic: the response is lost, the resume charges again under a fresh key."""
    ledger = LedgerSnapshot(calls=(charge(1, "k1", 1), charge(2, "k2", 2)))
    attempts = (
        Attempt(
            1, "during:payments.charge", KILLED, -9, 41.0, killed_at="during:payments.charge", signal="KILL"
        ),
        Attempt(2, None, EXITED, 0, 55.0, notes=("resumed_from_start",)),
    )
    kw: dict = dict(
        command=COMMAND,
        schedule="during:payments.charge",
        thread="t-abc",
        workdir="/tmp/killdrill/case-3",
        attempts=attempts,
        violations=tuple(judge(BASELINE, ledger, attempts)),
        notes=("resumed_from_start",),
        reproduce=REPRO,
        extra_reproduce=(PYTEST_REPRO,),
        summary=summarize(BASELINE, ledger),
        ledger=ledger,
    )
    kw.update(over)
    return CaseResult(**kw)


def ok_case(schedule: str) -> CaseResult:
    ledger = LedgerSnapshot(calls=(charge(1, "k1", 1),))
    attempts = (Attempt(1, schedule, KILLED, -9, 10.0, killed_at=schedule), Attempt(2, None, EXITED, 0, 20.0))
    return CaseResult(
        command=COMMAND,
        schedule=schedule,
        thread="t-ok",
        workdir="/tmp/killdrill/ok",
        attempts=attempts,
        reproduce=f"killdrill run --schedule {schedule} -- python agent.py",
        summary=summarize(BASELINE, ledger),
        ledger=ledger,
    )


def hung_case() -> CaseResult:
    attempts = (
        Attempt(
            1,
            "before:send_receipt",
            AttemptOutcome.HANG,
            -9,
            30000.0,
            signal="SIGKILL",
            stderr_tail="starting\nwaiting on smtp.example\n",
        ),
    )
    hang = Violation(kind=HANG, message="attempt 1 did not finish within 30 s; its process tree was killed")
    return CaseResult(
        COMMAND, "before:send_receipt", "t-h", "/tmp/killdrill/h", attempts, (hang,), reproduce=""
    )


def test_case_text_leads_with_verdict_schedule_and_command() -> None:
    text = render_case(duplicated_case())
    first = text.splitlines()[0]
    assert first.startswith("VIOLATED [during:payments.charge] python -m killdrill.examples.settlement")
    assert first.endswith(": duplicate_effect, key_changed")


def test_case_text_shows_each_call_lost_response_and_key_change() -> None:
    text = render_case(duplicated_case())
    assert (
        "1. duplicate_effect: payments.charge {account_id: acme, amount: 4200} landed 2 times (baseline 1)"
        in text
    )
    assert (
        "attempt 1  key k1  created  effect ch_1  — response lost (killed at during:payments.charge)" in text
    )
    assert "attempt 2  key k2  created  effect ch_2  <- key changed (was k1)" in text
    assert "Effects: payments 1 duplicated" in text
    assert text.count("<- key changed") == 1 and "2. key_changed:" in text and "(same calls as 1.)" in text


def test_case_text_has_attempts_notes_workdir_and_reproduction_last() -> None:
    text = render_case(duplicated_case())
    assert (
        "1. kill during:payments.charge: killed by SIGKILL at during:payments.charge (rc -9), 41 ms" in text
    )
    assert "2. ran free: exited rc 0, 55 ms" in text
    assert "resumed_from_start: the resumed attempt re-entered at the first boundary" in text
    assert "Workdir: /tmp/killdrill/case-3" in text
    lines = text.splitlines()
    assert lines[-3:] == ["Reproduce:", f"  {REPRO}", f"  {PYTEST_REPRO}"]
    assert "Call(" not in text and "{'" not in text  # no dumps of internals


def test_case_text_survives_a_json_round_trip_without_ledger() -> None:
    """`killdrill report` reads JSON back; lost responses come from the verdict's detail then."""
    back = CaseResult.from_dict(json.loads(json.dumps(duplicated_case(ledger=None).to_dict())))
    text = render_case(back)
    assert "response lost (killed at during:payments.charge)" in text
    assert text == render_case(duplicated_case(ledger=None))


def test_loop_level_violation_renders_with_stderr_tail_and_fallback_reproduction() -> None:
    text = render_case(hung_case())
    assert text.splitlines()[0].endswith(": hang")
    assert "1. hang: attempt 1 did not finish within 30 s" in text
    assert "hung: killed by the per-attempt timeout by SIGKILL" in text
    assert "| waiting on smtp.example" in text
    assert text.splitlines()[-1] == f"  killdrill run --schedule before:send_receipt -- {shlex.join(COMMAND)}"


def test_crash_tail_shown_only_for_crashed_attempts() -> None:
    crashed = Attempt(2, None, EXITED, 1, 5.0, stderr_tail="Traceback\nIdempotencyError: key k1 reused")
    clean = Attempt(3, None, EXITED, 0, 5.0, stderr_tail="noise on stderr")
    text = render_case(CaseResult(COMMAND, "before:x", "t", "/w", (crashed, clean)))
    assert "exited rc 1 — crashed" in text and "| IdempotencyError: key k1 reused" in text
    assert "noise on stderr" not in text


def test_exactly_once_case_says_so() -> None:
    text = render_case(ok_case("before:charge_customer"))
    assert text.splitlines()[0].startswith("EXACTLY-ONCE [before:charge_customer]")
    assert "violation" not in text
    assert "Effects: payments 1 exactly-once" in text


def test_summarize_cases_counts_cases_kinds_and_providers() -> None:
    cases = [ok_case("before:charge_customer"), duplicated_case(), duplicated_case(), hung_case()]
    assert summarize_cases(cases) == {
        "cases": 4,
        "ok": 1,
        "violated": 3,
        "by_kind": {"duplicate_effect": 2, "hang": 1, "key_changed": 2},
        "providers": {"payments": {"exactly_once": 1, "duplicated": 2, "lost": 0, "unexpected": 0}},
    }


def test_drill_text_has_catalogue_table_summary_and_failed_cases() -> None:
    drill = DrillResult(DISCOVERY, (ok_case("before:charge_customer"), duplicated_case(), ok_case("after:x")))
    text = render_drill(drill)
    assert "4 kill points reached by a clean run (120 ms)" in text
    assert "payments.charge: description" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["schedule", "verdict", "violations", "attempts"] in rows
    assert ["during:payments.charge", "VIOLATED", "duplicate_effect,key_changed", "2"] in rows
    assert ["before:charge_customer", "exactly-once", "-", "2"] in rows
    assert "3 cases: 2 exactly-once, 1 violated (duplicate_effect x1, key_changed x1)" in text
    failed = text.index("VIOLATED [during:payments.charge]")
    assert failed < text.index("Cases:") and REPRO in text[failed : text.index("Cases:")]
    assert text.splitlines()[-1].startswith("3 cases: ")  # a CI log ends on the totals
    assert "EXACTLY-ONCE [" not in text  # passing cases stay in the table only


def test_drill_summary_line_when_all_pass() -> None:
    text = render_drill(DrillResult(DISCOVERY, (ok_case("before:a"), ok_case("before:b"))))
    assert "2 cases: 2 exactly-once\n" in text + "\n"
    assert "violated" not in text


def test_catalogue_lists_points_in_order_with_counts_and_offsets() -> None:
    text = render_catalogue(DISCOVERY)
    rows = [line.split() for line in text.splitlines()[2:6]]
    assert text.splitlines()[1].split() == ["#", "point", "occurrence", "reached", "at"]
    assert rows == [
        ["1", "before:charge_customer", "1", "of", "1", "3.2", "ms"],
        ["2", "during:payments.charge", "1", "of", "1", "4.5", "ms"],
        ["3", "before:send_receipt", "1", "of", "2", "6.0", "ms"],
        ["4", "before:send_receipt#2", "2", "of", "2", "7.8", "ms"],
    ]
    assert "Baseline effects: payments.charge x1" in text


def test_drill_json_shape_and_write_json_round_trip(tmp_path: Path) -> None:
    drill = DrillResult(DISCOVERY, (ok_case("before:charge_customer"), duplicated_case()))
    out = write_json(tmp_path / "sub" / "report.json", drill_json(drill))
    data = json.loads(out.read_text())
    assert [c["verdict"] for c in data["cases"]] == ["exactly-once", "violated"]
    case = data["cases"][1]
    assert case["schedule"] == "during:payments.charge"
    assert [v["kind"] for v in case["violations"]] == ["duplicate_effect", "key_changed"]
    assert case["attempts"][0]["killed_at"] == "during:payments.charge"
    assert data["summary"] == summarize_cases(drill.cases)
    assert [p.name for p in out.parent.iterdir()] == ["report.json"]  # no temp file left behind
    write_json(tmp_path / "case.json", duplicated_case())  # objects with to_dict are accepted
    assert json.loads((tmp_path / "case.json").read_text())["verdict"] == "violated"


def test_report_command_merges_saved_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from killdrill.cli.commands import main

    shard1 = write_json(tmp_path / "a.json", DrillResult(DISCOVERY, (ok_case("before:charge_customer"),)))
    shard2 = write_json(tmp_path / "b.json", DrillResult(DISCOVERY, (duplicated_case(),)))
    assert main(["report", "--merge", str(shard1), "--json", str(tmp_path / "m.json")]) == 0
    assert main(["report", "--merge", str(shard1), str(shard2), "--json", str(tmp_path / "m.json")]) == 1
    out = capsys.readouterr().out
    assert "2 cases: 1 exactly-once, 1 violated" in out and REPRO in out
    merged = json.loads((tmp_path / "m.json").read_text())
    assert merged["summary"]["cases"] == 2 and merged["discovery"]["command"] == list(COMMAND)


def test_report_command_rejects_a_foreign_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from killdrill.cli.commands import main

    (tmp_path / "x.json").write_text('{"hello": 1}')
    assert main(["report", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a killdrill JSON report" in err[0]


def test_an_attempt_under_a_fault_that_is_not_a_kill_is_not_said_killed() -> None:
    """The process that reached a restart='s trigger went on, a drop: lost an answer: their
    attempts are under a fault, not a kill (a power loss is a kill, then the loss)."""
    attempts = (
        Attempt(1, "restart=api:driver:before:submit", EXITED, 0, 30.0, process="driver"),
        Attempt(
            2,
            "restart=api:driver:before:submit",
            KILLED,
            -9,
            20.0,
            killed_at="restart=api:driver:before:submit",
            process="api",
        ),
        Attempt(3, "drop:pg.commit", EXITED, 0, 10.0),
        Attempt(4, "powerloss:after:pay_alice", KILLED, -9, 10.0, killed_at="after:pay_alice"),
        Attempt(5, "api:during:payments.charge", KILLED, -9, 10.0, killed_at="during:payments.charge"),
    )
    text = render_case(dataclasses.replace(ok_case("restart=api:driver:before:submit"), attempts=attempts))
    assert "1. (driver) fault restart=api:driver:before:submit: exited rc 0" in text, text
    assert "2. (api) fault restart=api:driver:before:submit: killed at" in text, text
    assert "3. fault drop:pg.commit: exited rc 0" in text, text
    assert "4. kill powerloss:after:pay_alice: killed at after:pay_alice" in text, text
    assert "5. kill api:during:payments.charge: killed at during" in text, text
