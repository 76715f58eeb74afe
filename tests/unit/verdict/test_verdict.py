"""The oracle on constructed ledgers: each kind from its defect shape, none from a correct one."""

from __future__ import annotations

import itertools
from typing import Any

from killdrill.records import (
    CONFLICT,
    CREATED,
    DUPLICATE_EFFECT,
    EXITED,
    FAILED,
    KEY_CHANGED,
    KEY_REUSED,
    KILLED,
    MISSING_EFFECT,
    REJECTED,
    REPLAYED,
    STATE_DIVERGED,
    STUCK_IN_FLIGHT,
    UNEXPECTED_EFFECT,
    Attempt,
    Call,
    InFlight,
    LedgerSnapshot,
)
from killdrill.verdict import (
    STATE_VOLATILE,
    EffectNaming,
    canonical,
    effect_identity,
    judge,
    summarize,
    unknown_calls,
    volatile_fields,
)

_seq = itertools.count(1)
CHARGE = {"account_id": "acme", "billing_cycle": "2024-05", "amount": 4200}
EMAIL = {"to": "ap@acme.test", "subject": "receipt"}


def call(
    provider: str = "payments",
    op: str = "charge",
    key: str | None = "k1",
    payload: dict[str, Any] | None = None,
    outcome: str = CREATED,
    attempt: int = 1,
) -> Call:
    seq = next(_seq)
    return Call(
        seq=seq,
        provider=provider,
        op=op,
        key=key,
        payload=dict(CHARGE if payload is None else payload),
        outcome=outcome,
        effect_id=f"e{seq}" if outcome == CREATED else None,
        attempt=attempt,
        pid=1000 + attempt,
        time=float(seq),
    )


def snap(
    *calls: Call, state: dict[str, Any] | None = None, in_flight: tuple[InFlight, ...] = ()
) -> LedgerSnapshot:
    return LedgerSnapshot(calls=calls, state=state or {}, in_flight=in_flight)


def killed(number: int, at: str) -> Attempt:
    return Attempt(number=number, kill=at, outcome=KILLED, returncode=-9, duration_ms=10.0, killed_at=at)


def free(number: int) -> Attempt:
    return Attempt(number=number, kill=None, outcome=EXITED, returncode=0, duration_ms=10.0)


TWO_ATTEMPTS = (killed(1, "during:payments.charge"), free(2))
BASELINE = snap(call(key="b1"), call("mailbox", "send", None, EMAIL))


def kinds(violations: list) -> list[str]:
    return [v.kind for v in violations]


def test_canonical_is_order_insensitive() -> None:
    assert canonical({"b": 1, "a": [1, {"y": 2, "x": 1}]}) == canonical({"a": [1, {"x": 1, "y": 2}], "b": 1})
    assert canonical({"a": 1}) != canonical({"a": "1"})


# --- correct shapes: nothing is reported ---------------------------------------------------


def test_replay_after_lost_response_is_exactly_once() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call(key="k1", outcome=REPLAYED, attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    assert judge(BASELINE, case, TWO_ATTEMPTS) == []


def test_failed_then_retried_under_same_key_is_clean() -> None:
    case = snap(
        call(key="k1", outcome=FAILED, attempt=1),
        call(key="k1", attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    assert judge(BASELINE, case, TWO_ATTEMPTS) == []


def test_conflict_while_in_flight_then_replay_is_clean() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call(key="k1", outcome=CONFLICT, attempt=2),
        call(key="k1", outcome=REPLAYED, attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    assert judge(BASELINE, case, TWO_ATTEMPTS) == []


def test_volatile_field_changed_under_one_key_is_key_reused() -> None:
    """A model-written description differs on replay: the fake rejects it.  The field varies
    between clean runs, but under one key within a run it must not (a re-stamped ``sent_at``
    would hide this way): ``key_reused``, and nothing else when it is volatile."""
    base = snap(call(key="b1", payload={**CHARGE, "description": "May usage"}))
    case = snap(
        call(key="k1", payload={**CHARGE, "description": "Usage for May"}, attempt=1),
        call(key="k1", payload={**CHARGE, "description": "May usage, thanks"}, outcome=REJECTED, attempt=2),
    )
    volatile = {"payments.charge": ["description"]}
    found = judge(base, case, TWO_ATTEMPTS, naming=EffectNaming(volatile=volatile))
    assert kinds(found) == [KEY_REUSED]
    assert "varies between clean runs" in found[0].message
    # the same ledgers without the volatile knowledge are a real key reuse, and a changed effect
    assert set(kinds(judge(base, case, TWO_ATTEMPTS))) == {KEY_REUSED, UNEXPECTED_EFFECT, MISSING_EFFECT}


def test_repeated_identical_effects_with_distinct_keys_are_not_key_changes() -> None:
    """A loop that increments the same counter twice has two keys in the baseline too."""
    inc = {"name": "invoices", "by": 1}
    base = snap(call("counter", "increment", "b-1", inc), call("counter", "increment", "b-2", inc))
    case = snap(
        call("counter", "increment", "c-1", inc, attempt=1),
        call("counter", "increment", "c-1", inc, outcome=REPLAYED, attempt=2),
        call("counter", "increment", "c-2", inc, attempt=2),
    )
    assert judge(base, case, [killed(1, "during:counter.increment"), free(2)]) == []


def test_kv_sets_repeated_converge_and_are_not_duplicates() -> None:
    kv = {"key": "invoice:acme", "value": "sent"}
    base = snap(call("kv", "set", None, kv), state={"invoice:acme": "sent"})
    case = snap(
        call("kv", "set", None, kv, attempt=1),
        call("kv", "set", None, kv, attempt=2),
        state={"invoice:acme": "sent"},
    )
    assert judge(base, case, TWO_ATTEMPTS) == []


# --- defect shapes ---------------------------------------------------------------------------


def test_new_key_per_attempt_duplicates_and_changes_key() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call(key="k2", attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    got = judge(BASELINE, case, TWO_ATTEMPTS)
    assert kinds(got) == [DUPLICATE_EFFECT, KEY_CHANGED]
    dup = got[0]
    assert dup.message == (
        "payments.charge {account_id: acme, amount: 4200, billing_cycle: 2024-05}"
        " landed 2 times (baseline 1): attempt 1 key k1 created (response lost),"
        " attempt 2 key k2 created — the key changed between attempts"
    )
    assert (dup.provider, dup.op, dup.identity) == ("payments", "charge", CHARGE)
    assert [c.key for c in dup.calls] == ["k1", "k2"]
    assert dup.detail["landed"] == 2 and dup.detail["baseline"] == 1
    assert dup.detail["calls"][0]["response_lost"] == "during:payments.charge"
    assert dup.detail["calls"][1]["response_lost"] is None
    changed = got[1]
    assert "used 2 idempotency keys" in changed.message and "attempt 2 k1 -> k2" in changed.message
    assert changed.detail["distinct_keys"] == ["k1", "k2"]


def test_a_duplicate_names_the_runtime_attempts_that_landed_it() -> None:
    # An integration's runtime context on each call (Temporal: the activity's own attempt number)
    from dataclasses import replace

    ctx = {"runtime": "temporal", "unit": "activity", "name": "charge", "id": "2", "run": "{thread}"}
    first, second = call(key="k1", attempt=1), call(key="k2", attempt=2)
    case = snap(replace(first, context={**ctx, "attempt": 1}), replace(second, context={**ctx, "attempt": 2}))
    dup = judge(BASELINE, case, TWO_ATTEMPTS)[0]
    assert dup.kind == DUPLICATE_EFFECT
    assert dup.message.endswith("(landed by temporal activity charge attempts 1 and 2)"), dup.message
    assert dup.detail["runtime"] == "temporal activity charge attempts 1 and 2"
    assert dup.detail["runtime_attempts"] == [1, 2]
    assert [c["attempt"] for c in dup.detail["runtime_calls"]] == [1, 2]  # the drill's attempts
    assert dup.detail["calls"][1]["context"]["attempt"] == 2
    plain = judge(BASELINE, snap(call(key="k1", attempt=1), call(key="k2", attempt=2)), TWO_ATTEMPTS)[0]
    assert "runtime" not in plain.detail and "landed by" not in plain.message


def test_a_duplicate_names_a_broker_redelivery_of_the_same_try() -> None:
    # Celery: the same try (retries + 1) delivered again by the broker after a killed worker
    from dataclasses import replace

    ctx = {"runtime": "celery", "unit": "task", "name": "checkout", "attempt": 1}
    first, second = call(key="k1", attempt=1), call(key="k2", attempt=2)
    case = snap(
        replace(first, context={**ctx, "redelivered": False}),
        replace(second, context={**ctx, "redelivered": True}),
    )
    dup = judge(BASELINE, case, TWO_ATTEMPTS)[0]
    assert dup.detail["runtime"] == "celery task checkout attempts 1 and 1 (redelivered)", dup.detail


def test_ungated_email_is_a_keyless_duplicate() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call("mailbox", "send", None, EMAIL, attempt=1),
        call(key="k1", outcome=REPLAYED, attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    got = judge(BASELINE, case, [killed(1, "before:write_invoice"), free(2)])
    assert kinds(got) == [DUPLICATE_EFFECT]
    assert got[0].provider == "mailbox"
    assert "sent without an idempotency key" in got[0].message


def test_key_changed_is_reported_even_when_nothing_duplicated() -> None:
    case = snap(
        call(key="k1", outcome=FAILED, attempt=1),
        call(key="k2", attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    assert kinds(judge(BASELINE, case, TWO_ATTEMPTS)) == [KEY_CHANGED]


def test_keyless_call_of_a_keyed_effect_is_a_key_change() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call(key=None, outcome=FAILED, attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    got = judge(BASELINE, case, TWO_ATTEMPTS)
    assert kinds(got) == [KEY_CHANGED]
    assert "with and without a key" in got[0].message and "k1 -> (no key)" in got[0].message


def test_payload_recomputed_under_same_key_is_key_reused() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call(key="k1", payload={**CHARGE, "amount": 4300}, outcome=REJECTED, attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    for identity in ({}, {"payments.charge": ["account_id", "billing_cycle"]}):
        got = judge(BASELINE, case, TWO_ATTEMPTS, naming=EffectNaming(identity))
        assert kinds(got) == [KEY_REUSED], identity
        assert got[0].detail["differs"] == ["amount"]
        assert "payments key k1 was used for 2 different effects" in got[0].message
        assert "recomputed on replay" in got[0].message


def test_amount_recomputed_under_new_key_is_unexpected_and_missing_baseline_named() -> None:
    case = snap(
        call(key="k1", outcome=FAILED, attempt=1),
        call(key="k2", payload={**CHARGE, "amount": 4300}, attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    got = judge(BASELINE, case, TWO_ATTEMPTS)
    assert kinds(got) == [MISSING_EFFECT, UNEXPECTED_EFFECT]  # effects in order of first call
    assert "amount: 4200" in got[0].message and "never landed (baseline 1)" in got[0].message
    assert "attempt 1 key k1 failed" in got[0].message
    assert "amount: 4300" in got[1].message and "differs in amount" in got[1].message


def test_identity_config_turns_recomputed_charge_into_duplicate() -> None:
    case = snap(
        call(key="k1", attempt=1),
        call(key="k2", payload={**CHARGE, "amount": 4300}, attempt=2),
        call("mailbox", "send", None, EMAIL, attempt=2),
    )
    identity = {"payments.charge": ["account_id", "billing_cycle"]}
    got = judge(BASELINE, case, TWO_ATTEMPTS, naming=EffectNaming(identity))
    assert kinds(got) == [DUPLICATE_EFFECT, KEY_CHANGED]
    assert got[0].identity == {"account_id": "acme", "billing_cycle": "2024-05"}
    assert got[0].message.startswith(
        "payments.charge {account_id: acme, billing_cycle: 2024-05} landed 2 times"
    )


def test_missing_effect_when_the_resume_skipped_it() -> None:
    case = snap(call(key="k1", attempt=1))
    got = judge(BASELINE, case, TWO_ATTEMPTS)
    assert kinds(got) == [MISSING_EFFECT]
    assert got[0].provider == "mailbox" and "no call was made" in got[0].message


def test_fewer_landings_than_baseline_is_missing() -> None:
    inc = {"name": "n", "by": 1}
    base = snap(call("counter", "increment", None, inc), call("counter", "increment", None, inc))
    case = snap(call("counter", "increment", None, inc))
    got = judge(base, case, [free(1)])
    assert kinds(got) == [MISSING_EFFECT] and "landed 1 time (baseline 2)" in got[0].message


def test_increment_disguised_as_set_diverges_state() -> None:
    base = snap(call("kv", "set", None, {"key": "count", "value": 1}), state={"count": 1})
    case = snap(
        call("kv", "set", None, {"key": "count", "value": 1}, attempt=1),
        call("kv", "set", None, {"key": "count", "value": 2}, attempt=2),
        state={"count": 2},
    )
    got = judge(base, case, TWO_ATTEMPTS)
    assert kinds(got) == [STATE_DIVERGED]
    assert got[0].message == "kv 'count' ended as 2 (baseline 1): written by attempt 1, attempt 2"
    assert got[0].detail["value"] == 2 and got[0].detail["baseline"] == 1


def test_state_key_missing_or_extra_diverges() -> None:
    got = judge(snap(state={"a": 1}), snap(state={"b": 1}), [free(1)])
    assert kinds(got) == [STATE_DIVERGED, STATE_DIVERGED]
    assert "missing at the end" in got[0].message and "never set it" in got[1].message


def test_stuck_in_flight() -> None:
    stuck = InFlight(provider="payments", op="charge", key="k1", attempt=1, since=1.0)
    case = snap(
        call(key="k1", attempt=1), call("mailbox", "send", None, EMAIL, attempt=2), in_flight=(stuck,)
    )
    got = judge(BASELINE, case, TWO_ATTEMPTS)
    assert kinds(got) == [STUCK_IN_FLIGHT]
    assert "key k1 is still in flight" in got[0].message and got[0].detail["attempt"] == 1


# --- volatile fields, identity, unknown calls, summary ------------------------------------------


def test_volatile_fields_from_two_clean_runs() -> None:
    a = snap(
        call(payload={**CHARGE, "description": "x"}),
        call("mailbox", "send", None, {**EMAIL, "sent_at": 1}),
        call("mailbox", "send", None, {**EMAIL, "sent_at": 2}),
        state={"summary": "one wording", "status": "paid"},
    )
    b = snap(
        call(payload={**CHARGE, "description": "y"}),
        call("mailbox", "send", None, {**EMAIL, "sent_at": 5, "cc": "x"}),
        state={"summary": "other wording", "status": "paid"},
    )
    assert volatile_fields(a, b) == {
        "payments.charge": ["description"],
        "mailbox.send": ["cc", "sent_at"],
        STATE_VOLATILE: ["summary"],
    }
    assert volatile_fields(a, a) == {}


def test_volatile_fields_are_left_out_of_identity_and_state() -> None:
    base = snap(call(key="b1", payload={**CHARGE, "description": "x"}), state={"summary": "a", "n": 1})
    case = snap(call(key="k1", payload={**CHARGE, "description": "y"}), state={"summary": "b", "n": 1})
    volatile = {"payments.charge": ["description"], STATE_VOLATILE: ["summary"]}
    assert judge(base, case, [free(1)], naming=EffectNaming(volatile=volatile)) == []
    assert set(kinds(judge(base, case, [free(1)]))) == {UNEXPECTED_EFFECT, MISSING_EFFECT, STATE_DIVERGED}


def test_configured_identity_wins_over_volatile() -> None:
    ident = effect_identity(
        "payments",
        "charge",
        {**CHARGE, "description": "d"},
        EffectNaming(
            identity={"payments.charge": ["account_id", "missing_field"]},
            volatile={"payments.charge": ["account_id"]},
        ),
    )
    assert ident == {"account_id": "acme"}


def test_unknown_calls_pick_the_nth_call_of_the_killed_attempt_only() -> None:
    c1, c2, c3 = call(key="a", attempt=1), call(key="b", attempt=1), call(key="c", attempt=2)
    assert unknown_calls([c1, c2, c3], [killed(1, "during:payments.charge#2"), free(2)]) == {
        c2.seq: "during:payments.charge#2"
    }
    # a delayed kill may or may not have cut the response; other kinds cut none
    assert unknown_calls([c1, c2], [killed(1, "during:payments.charge+3ms")]) == {}
    assert unknown_calls([c1, c2], [killed(1, "before:charge_customer"), killed(2, "offset:5ms")]) == {}


def test_summarize_counts_each_logical_effect_once_per_provider() -> None:
    inc = {"name": "n", "by": 1}
    base = snap(
        call(key="b1"),
        call("mailbox", "send", None, EMAIL),
        call("counter", "increment", None, inc),
        call("kv", "set", None, {"key": "s", "value": 1}),
    )
    case = snap(
        call(key="k1"),
        call(key="k1", outcome=REPLAYED),
        call("mailbox", "send", None, EMAIL),
        call("mailbox", "send", None, EMAIL),
        call("tickets", "create", None, {"title": "t"}),
        call(key="k9", payload={**CHARGE, "amount": 1}, outcome=REJECTED),
        call("kv", "set", None, {"key": "s", "value": 1}),
        call("kv", "set", None, {"key": "s", "value": 1}),
    )
    zero = {"exactly_once": 0, "duplicated": 0, "lost": 0, "unexpected": 0}
    assert summarize(base, case) == {
        "payments": {**zero, "exactly_once": 1},
        "mailbox": {**zero, "duplicated": 1},
        "tickets": {**zero, "unexpected": 1},
        "counter": {**zero, "lost": 1},
        "kv": {**zero, "exactly_once": 1},
    }


def _undo_ledger(order: list[str]) -> LedgerSnapshot:
    """reserve res_1 then charge ch_1, then the two undos in ``order``."""
    from killdrill.records import Call

    calls = [
        Call(1, "inventory", "reserve", None, {"sku": "lamp", "qty": 1}, "created", "res_1", 1, 1, 0.0),
        Call(2, "payments", "charge", "k", {"amount": 5}, "created", "ch_1", 1, 1, 0.0),
    ]
    undo = {
        "release": ("inventory", "release", {"reservation_id": "res_1"}, "res_1"),
        "refund": ("payments", "refund", {"charge_id": "ch_1"}, "re_1"),
    }
    for seq, name in enumerate(order, start=3):
        provider, op, payload, effect = undo[name]
        calls.append(Call(seq, provider, op, None, payload, "created", effect, 1, 1, 0.0))
    return LedgerSnapshot(calls=tuple(calls))


def test_compensation_order_is_an_opt_in_check() -> None:
    from killdrill.verdict import judge

    wrong, right = _undo_ledger(["release", "refund"]), _undo_ledger(["refund", "release"])
    checks = ("compensation_order",)
    assert [v.kind for v in judge(wrong, wrong, (), checks=checks)] == ["compensation_order"]
    assert judge(right, right, (), checks=checks) == []
    assert judge(wrong, wrong, ()) == []  # not asked for: effect counting alone cannot see it
