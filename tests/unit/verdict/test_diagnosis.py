"""The diagnosis on constructed ledgers: each violation's cause and fix, consequences nested."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from killdrill.records import (
    CREATED,
    DUPLICATE_EFFECT,
    EXITED,
    KEY_CHANGED,
    KILLED,
    MISSING_EFFECT,
    UNEXPECTED_EFFECT,
    Attempt,
    Call,
    LedgerSnapshot,
    Violation,
)
from killdrill.verdict import judge, summarize
from killdrill.verdict.consequences import regroup_summary
from killdrill.verdict.diagnosis import FIXES, CauseName, diagnose, key_shape

_seq = itertools.count(1)
CHARGE = {"customer": "acme", "amount": 4200}


def call(provider: str, op: str, key: str | None, payload: dict[str, Any], attempt: int, eid: str) -> Call:
    return Call(next(_seq), provider, op, key, payload, CREATED, eid, attempt, 100 + attempt, 0.0)


KILLED_DURING = Attempt(1, "during:payments.charge", KILLED, -9, 1.0, killed_at="during:payments.charge")
RESUMED = Attempt(2, None, EXITED, 0, 1.0)


def _charge_bug(keys: tuple[str | None, str | None]) -> tuple[LedgerSnapshot, LedgerSnapshot]:
    base = LedgerSnapshot(
        (
            call("payments", "charge", "t:charge", CHARGE, 1, "ch_0001"),
            call("webhooks", "post", "t:hook", {"body": {"charge": "ch_0001"}}, 1, "wh_0001"),
            call("mailbox", "send", None, {"to": "a@x", "body": "charged ch_0001"}, 1, "msg_0001"),
        )
    )
    case = LedgerSnapshot(
        (
            call("payments", "charge", keys[0], CHARGE, 1, "ch_0001"),
            call("payments", "charge", keys[1], CHARGE, 2, "ch_0002"),
            call("webhooks", "post", "t:hook", {"body": {"charge": "ch_0002"}}, 2, "wh_0001"),
            call("mailbox", "send", None, {"to": "a@x", "body": "charged ch_0002"}, 2, "msg_0001"),
        )
    )
    return base, case


def _diagnosed(keys: tuple[str | None, str | None]) -> tuple[list[Violation], dict[str, dict[str, int]]]:
    base, case = _charge_bug(keys)
    attempts = [KILLED_DURING, RESUMED]
    out = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)
    return out, regroup_summary(summarize(base, case), out)


def test_one_uuid_key_is_one_root_with_its_consequences() -> None:
    out, summary = _diagnosed(
        ("charge-6a127e98-09b5-42d3-9c77-a9d9b7c1fce5", "charge-01ee201b-d222-4ed6-98d8-efebc40589c0")
    )
    assert [v.kind for v in out] == [DUPLICATE_EFFECT, KEY_CHANGED]
    dup = out[0]
    assert (
        dup.cause == CauseName.KEY_NEW_PER_ATTEMPT
        and "uuid4" in dup.observed
        and "response was lost" in dup.observed
    )
    assert dup.fix == FIXES[CauseName.KEY_NEW_PER_ATTEMPT]
    kids = {(k.kind, k.provider) for k in dup.consequences}
    assert kids == {
        (MISSING_EFFECT, "webhooks"),
        (UNEXPECTED_EFFECT, "webhooks"),
        (MISSING_EFFECT, "mailbox"),
        (UNEXPECTED_EFFECT, "mailbox"),
    }
    assert all(k.cause == CauseName.CONSEQUENCE and "ch_0002" in k.observed for k in dup.consequences)
    assert summary["webhooks"]["lost"] == 0 and summary["webhooks"]["unexpected"] == 0
    assert summary["webhooks"]["consequence"] == 1 and summary["mailbox"]["consequence"] == 1
    assert summary["payments"]["duplicated"] == 1


def test_no_key_is_named_with_its_fix() -> None:
    out, _ = _diagnosed((None, None))
    assert out[0].kind == DUPLICATE_EFFECT and out[0].cause == CauseName.NO_KEY
    assert "idempotency_key" in out[0].fix
    assert len(out[0].consequences) == 4


def test_the_stripe_sdks_own_key_is_recognised() -> None:
    assert key_shape("3f1c2a9b-77d0-12aa-0c3e-5b6f7a8b9c0d") == "sdk"  # no uuid4 version bits
    assert key_shape("charge-6a127e98-09b5-42d3-9c77-a9d9b7c1fce5") == "a uuid4"
    assert key_shape("charge-acme-1718000000123456789") == "the clock"
    out, _ = _diagnosed(("3f1c2a9b-77d0-12aa-0c3e-5b6f7a8b9c0d", "0a9e8d7c-6b5a-f4e3-d2c1-b0a998877665"))
    assert out[0].cause == CauseName.SDK_GENERATED_KEY
    assert "new in every process" in out[0].observed and "idempotency_key=" in out[0].fix


def test_a_duplicated_email_says_gate_and_reconcile() -> None:
    base = LedgerSnapshot((call("mailbox", "send", None, {"to": "a@x", "body": "hi"}, 1, "msg_0001"),))
    case = LedgerSnapshot(
        (
            call("mailbox", "send", None, {"to": "a@x", "body": "hi"}, 1, "msg_0001"),
            call("mailbox", "send", None, {"to": "a@x", "body": "hi"}, 2, "msg_0002"),
        )
    )
    attempts = [Attempt(1, "during:mailbox.send", KILLED, -9, 1.0, killed_at="during:mailbox.send"), RESUMED]
    (v,) = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)
    assert v.cause == CauseName.IRREVERSIBLE_RESENT and "irreversible" in v.observed
    assert "lookup" in v.fix and "gate" in v.fix


def test_an_unfinished_resume_names_itself() -> None:
    base = LedgerSnapshot((call("webhooks", "post", "t:hook", {"body": 1}, 1, "wh_0001"),))
    attempts = [
        Attempt(1, "committed:charge", KILLED, -9, 1.0, killed_at="committed:charge"),
        Attempt(2, None, EXITED, 0, 1.0, unfinished=("notify",)),
    ]
    (v,) = diagnose(judge(base, LedgerSnapshot(), attempts), baseline=base, attempts=attempts)
    assert v.kind == MISSING_EFFECT and v.cause == CauseName.UNFINISHED_RESUME
    assert "pending tasks (notify)" in v.observed and "snap" not in v.fix  # no framework's code
    (lg,) = diagnose(
        judge(base, LedgerSnapshot(), attempts), baseline=base, attempts=attempts, integrations=("langgraph",)
    )
    assert lg.cause == CauseName.UNFINISHED_RESUME and lg.observed == v.observed
    assert "snap = graph.get_state(config)" in lg.fix  # LangGraph's record says how, under LangGraph


def test_a_missing_effect_without_a_known_cause_says_what_is_known() -> None:
    base = LedgerSnapshot((call("webhooks", "post", "t:hook", {"body": 1}, 1, "wh_0001"),))
    attempts = [Attempt(1, "committed:charge", KILLED, -9, 1.0, killed_at="committed:charge"), RESUMED]
    (v,) = diagnose(judge(base, LedgerSnapshot(), attempts), baseline=base, attempts=attempts)
    assert v.cause == CauseName.NOT_CALLED and "no attempt called it" in v.observed


def test_diagnosis_round_trips_through_json() -> None:
    out, _ = _diagnosed((None, None))
    again = Violation.from_dict(out[0].to_dict())
    assert again == out[0] and again.to_dict()["cause"] == "no_key" and again.consequences


def _runtime_call(key: str, attempt: int, runtime_attempt: int, eid: str) -> Call:
    ctx = {"runtime": "temporal", "unit": "activity", "name": "charge", "attempt": runtime_attempt}
    return Call(next(_seq), "payments", "charge", key, CHARGE, CREATED, eid, attempt, 100, 0.0, context=ctx)


def _runtime_key_bug(same_process: bool) -> list[Violation]:
    base = LedgerSnapshot((_runtime_call("{thread}:charge:1", 1, 1, "ch_0001"),))
    retry = 1 if same_process else 2  # the runtime's retry in the killed worker's process, or a new one
    case = LedgerSnapshot(
        (
            _runtime_call("{thread}:charge:1", 1, 1, "ch_0001"),
            _runtime_call("{thread}:charge:2", retry, 2, "ch_0002"),
        )
    )
    attempts = [KILLED_DURING, RESUMED]
    return diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)


def test_a_key_built_from_the_runtimes_attempt_number_says_so() -> None:
    """The runtime context records each call's attempt number: a key that differs only by it is
    named, whether the retry landed in a new process or in the same one (not a new key per call)."""
    for same_process in (False, True):
        out = _runtime_key_bug(same_process)
        assert [v.kind for v in out] == [DUPLICATE_EFFECT, KEY_CHANGED], out
        for v in out:
            assert v.cause == "key_new_per_attempt", (same_process, v.cause, v.observed)
            assert "the key includes the runtime's attempt number, {thread}:charge:{attempt}" in str(
                v.observed
            )
            assert "temporal activity charge's attempt 1 sent {thread}:charge:1" in str(v.observed)
        assert "runtime's attempt number" in out[0].fix


def test_a_key_that_does_not_follow_the_attempt_number_is_not_blamed_on_it() -> None:
    base = LedgerSnapshot((_runtime_call("{thread}:charge", 1, 1, "ch_0001"),))
    case = LedgerSnapshot(
        (
            _runtime_call("charge-3f1c9a2e-4b7d-4c1a-9f2e-1a2b3c4d5e6f", 1, 1, "ch_0001"),
            _runtime_call("charge-8d0e7f6a-5b4c-4d3e-8f2a-6b5c4d3e2f1a", 2, 2, "ch_0002"),
        )
    )
    attempts = [KILLED_DURING, RESUMED]
    out = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)
    assert out[0].cause == "key_new_per_attempt"
    assert "runtime's attempt number" not in str(out[0].observed) and "uuid4" in str(out[0].observed)


def test_a_run_cut_by_the_attempt_limit_says_the_drill_stopped_it() -> None:
    """``--max-attempts 1`` with a kill: no resume ran, so nothing crashed on its own."""
    from killdrill.drill.case import never_completed

    v = never_completed([KILLED_DURING], 1)
    [out] = diagnose([v], baseline=LedgerSnapshot(), attempts=[KILLED_DURING])
    assert out.cause == "attempt_limit", out
    assert "the drill stopped after its attempt limit (1 attempt(s), max_attempts)" in out.message
    assert "no resume ran" in out.message and "--max-attempts" in out.fix
    crashed = Attempt(2, None, EXITED, 1, 1.0)
    [other] = diagnose([never_completed([KILLED_DURING, crashed], 2)], baseline=LedgerSnapshot(), attempts=[])
    assert other.cause == "resume_crashed", other


def _model_answer(ids: list[str], attempt: int) -> Call:
    return Call(next(_seq), "model", "responses", None, {"ids": ids}, "answered", None, attempt, 1, 0.0)


def test_a_key_holding_the_tool_call_id_the_model_issued_is_named_so() -> None:
    """The fact is the ledger's (the ids the model fake issued), not the key's shape: the same keys
    without those records are a plain new-key-per-attempt."""
    keys = ("call_a1b2c3d4e5f6a7b8c9d0e1f2", "call_0f1e2d3c4b5a69788796a5b4")
    base, case = _charge_bug(keys)
    attempts = [KILLED_DURING, RESUMED]
    model = (_model_answer([keys[0][5:]], 1), _model_answer([keys[1][5:]], 2))
    ledger = LedgerSnapshot(model + case.calls)
    found = diagnose(judge(base, ledger, attempts), baseline=base, attempts=attempts, ledger=ledger)
    root = next(v for v in found if v.kind == DUPLICATE_EFFECT)
    assert root.cause == CauseName.MODEL_ID_KEY and root.fix == FIXES[CauseName.MODEL_ID_KEY]
    assert f"{keys[0]} in attempt 1, {keys[1]} in attempt 2" in root.observed
    plain = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts, ledger=case)
    assert next(v for v in plain if v.kind == DUPLICATE_EFFECT).cause == CauseName.KEY_NEW_PER_ATTEMPT


def test_an_undeclared_providers_cause_never_says_it_takes_no_key() -> None:
    """The MCP proxy's ``NAME``: killdrill knows only what ``--key`` told the proxy.  One key
    landed twice is the server not deduping it; no key sent is ``no_key``, not "takes none"."""
    book = {"guest": "Ana", "room": "12"}
    attempts = [Attempt(1, "during:hotel.book", KILLED, -9, 1.0, killed_at="during:hotel.book"), RESUMED]
    for key, cause in (("r1", CauseName.PROVIDER_NOT_DEDUPING), (None, CauseName.NO_KEY)):
        base = LedgerSnapshot((call("hotel", "book", key, book, 1, "hotel_1"),))
        case = LedgerSnapshot(
            (call("hotel", "book", key, book, 1, "hotel_1"), call("hotel", "book", key, book, 2, "hotel_2"))
        )
        (v,) = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)
        assert v.kind == DUPLICATE_EFFECT and v.cause == cause, v
        assert "takes no" not in v.observed and "takes no" not in v.fix


def _row(attempt: int) -> Call:
    return Call(next(_seq), "db:payouts", "insert", None, {"order_id": "o1"}, CREATED, "o1", attempt, 0, 0.0)


def test_a_row_written_again_after_a_cut_at_a_commit_says_the_answer_was_lost() -> None:
    """``cut=``/``rst=`` at ``during:NAME.commit`` lose the answer to a commit that landed, as
    ``drop:`` does: the retry's second row is explained by the same story."""
    base = LedgerSnapshot((_row(1),))
    case = LedgerSnapshot((_row(1), _row(1)))
    for kill in ("cut=pg:during:pg.commit", "rst=pg:worker:during:pg.commit#2", "drop:pg.commit"):
        attempts = [Attempt(1, kill, EXITED, 0, 1.0, process="worker" if "worker" in kill else None)]
        (v,) = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)
        assert v.cause == "row_not_unique", v
        assert f"on a retry after {kill} lost the answer to a commit that landed" in v.observed, v.observed
    stalled = [Attempt(1, "stall=pg~1s:during:pg.commit", EXITED, 0, 1.0)]  # late, not lost
    (v,) = diagnose(judge(base, case, stalled), baseline=base, attempts=stalled)
    assert "lost the answer" not in v.observed, v.observed


def test_a_hang_after_a_dependency_restarted_under_the_run_names_it_and_its_fix() -> None:
    """A run that hung (or failed) after a ``restart=`` of its dependency: the cause is the restart,
    and the fix is about surviving it, not a lock held by a killed attempt."""
    driver = Attempt(1, None, "hang", -9, 15000.0, process="driver")
    redis = Attempt(
        2,
        "restart=redis:worker:during:payments.charge",
        KILLED,
        -9,
        500.0,
        killed_at="restart=redis:worker:during:payments.charge",
        process="redis",
    )
    worker = Attempt(3, "restart=redis:worker:during:payments.charge", EXITED, 0, 15000.0, process="worker")
    attempts = [driver, redis, worker]
    hung = Violation("hang", "attempt 1 hung: no exit within 15s")
    (v,) = diagnose([hung], baseline=LedgerSnapshot(), attempts=attempts)
    assert v.cause == "dependency_restarted", v
    assert "the run's dependency redis (attempt 2, restart=redis:worker:during:payments.charge)" in v.observed
    assert v.fix == FIXES[CauseName.DEPENDENCY_RESTARTED]
    assert "result_backend_always_retry" in v.fix and "lock" not in v.fix
    failed = Violation("resume_failed", "attempt 1 exited rc 1 and no attempt completed the run")
    (f,) = diagnose([failed], baseline=LedgerSnapshot(), attempts=attempts)
    assert f.cause == "dependency_restarted", f
    alone = [driver, worker]  # nothing restarted: a hang is a hang
    (h,) = diagnose([hung], baseline=LedgerSnapshot(), attempts=alone)
    assert h.cause == "hang", h


def test_a_hang_after_an_integrations_service_restarted_names_it() -> None:
    """``restart=temporal:...``: the runtime's server has no attempt of its own; the attempt that
    reached the trigger records it (``Attempt.restarted``), and a hang after it is the restart's."""
    fault = "restart=temporal:worker:during:payments.charge"
    driver = Attempt(1, None, "hang", -9, 15000.0, process="driver")
    worker = Attempt(2, fault, EXITED, 0, 15000.0, process="worker", restarted=("temporal",))
    hung = Violation("hang", "attempt 1 hung: no exit within 15s")
    (v,) = diagnose([hung], baseline=LedgerSnapshot(), attempts=[driver, worker])
    assert v.cause == "dependency_restarted", v
    assert f"the run's dependency temporal ({fault}, reached by attempt 2)" in v.observed, v.observed
    trigger_only = replace(worker, restarted=())  # the trigger reached, nothing restarted: a hang
    (h,) = diagnose([hung], baseline=LedgerSnapshot(), attempts=[driver, trigger_only])
    assert h.cause == "hang", h
    assert Attempt.from_dict(worker.to_dict()) == worker  # the fact survives result.json


def test_an_unkeyed_charge_repeated_after_its_runtimes_server_restarted_says_so_not_a_kill() -> None:
    """The worker that reached ``restart=temporal:...`` was never killed: its call landed, then
    the runtime's server went down under it and the runtime ran the activity again."""
    base = LedgerSnapshot((call("payments", "charge", "k", CHARGE, 1, "ch_0001"),))
    case = LedgerSnapshot(
        (
            call("payments", "charge", None, CHARGE, 2, "ch_0001"),
            call("payments", "charge", None, CHARGE, 2, "ch_0002"),
        )
    )
    fault = "restart=temporal:worker:during:payments.charge"
    attempts = [
        Attempt(1, None, EXITED, 0, 1.0, process="driver"),
        Attempt(2, fault, EXITED, 0, 1.0, process="worker", restarted=("temporal",)),
    ]
    (v,) = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)
    assert v.cause == "no_key", v
    assert "attempt 2's call landed, then its dependency temporal was restarted under it" in v.observed, (
        v.observed
    )
    assert "before its kill" not in v.observed
    served = "restart=pg:worker:after:charge"  # a --serve database: its own attempt was the one killed
    attempts[1] = Attempt(2, served, EXITED, 0, 1.0, process="worker")
    attempts.append(Attempt(3, served, KILLED, -9, 1.0, killed_at=served, process="pg"))
    (v,) = diagnose(judge(base, case, attempts), baseline=base, attempts=attempts)
    assert "attempt 2's call landed, then its dependency pg was restarted under it" in v.observed, v.observed
