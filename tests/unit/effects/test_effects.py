"""The durable-effects toolkit on SQLite and PostgreSQL: keys, claims, in-flight handling, gates
and sagas, in this process (the real two-process races and the example agent run by hand are in
tests/acceptance/test_effects_processes.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from killdrill.effects import (
    EffectAlreadyInFlight,
    EffectError,
    KeyReuseError,
    ResultStore,
    SagaFailed,
    SagaStep,
    StepRejected,
    TransportNotSent,
    canonical_json,
    durable_effect,
    gate,
    idempotency_key,
    run_saga,
)

# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def store(store_url: str) -> Any:
    s = ResultStore(store_url)
    yield s
    s.close()


def _dead_owner(store: ResultStore, key: str) -> None:
    """Make a claim look as if a killed process left it (same host, a pid that is gone)."""
    with store.engine.begin() as conn:
        conn.execute(store.states.update().where(store.states.c.key == key).values(owner=_DEAD))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _dead_token() -> str:
    import socket

    return f"{socket.gethostname()}:{_dead_pid()}:1.00:1"


_DEAD = _dead_token()

# --------------------------------------------------------------------------- keys


def test_idempotency_key_is_stable_and_distinct() -> None:
    k = idempotency_key("t1", "charge_customer", 0, {"account": "acme", "cycle": "2024-06"})
    assert k == idempotency_key("t1", "charge_customer", 0, {"cycle": "2024-06", "account": "acme"})
    assert k.startswith("charge_customer-") and len(k) == len("charge_customer-") + 32
    others = {
        idempotency_key("t2", "charge_customer", 0, {"account": "acme", "cycle": "2024-06"}),
        idempotency_key("t1", "send_receipt", 0, {"account": "acme", "cycle": "2024-06"}),
        idempotency_key("t1", "charge_customer", 1, {"account": "acme", "cycle": "2024-06"}),
        idempotency_key("t1", "charge_customer", 0, {"account": "acme", "cycle": "2024-07"}),
    }
    assert k not in others and len(others) == 4
    # computed in another process (another hash seed): the same key
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from killdrill.effects import idempotency_key as k;"
            "print(k('t1','charge_customer',0,{'cycle':'2024-06','account':'acme'}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == k


def test_canonical_json_refuses_values_without_a_stable_text() -> None:
    import datetime

    assert canonical_json({"b": [1, 2.5], "a": "é"}) == '{"a":"é","b":[1,2.5]}'
    with pytest.raises(TypeError):
        canonical_json({"at": datetime.datetime(2024, 1, 1)})
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})
    with pytest.raises(TypeError):
        canonical_json({1: "int key"})


# --------------------------------------------------------------------------- the store


def test_claim_complete_replay(store: ResultStore) -> None:
    c = store.claim("k1", thread="t", node="n", occurrence=0, payload={"a": 1})
    assert c.state == "claimed" and c.record.status == "in_flight"
    store.complete("k1", {"id": "ch_1"})
    again = store.claim("k1", thread="t", node="n", occurrence=0, payload={"a": 1})
    assert again.state == "succeeded" and again.record.result == {"id": "ch_1"}
    rec = store.get("k1")
    assert rec is not None and rec.replayed and rec.replay_count == 1 and rec.completed_at is not None
    assert [e.event for e in store.log(key="k1")] == ["claimed", "succeeded", "replayed"]


def test_key_reused_for_another_payload_is_refused(store: ResultStore) -> None:
    store.claim("k", payload={"amount": 100})
    with pytest.raises(KeyReuseError):
        store.claim("k", payload={"amount": 101})


def test_release_only_from_in_flight_then_claim_again(store: ResultStore) -> None:
    store.claim("k")
    store.release("k")
    with pytest.raises(EffectError):
        store.release("k")
    with pytest.raises(EffectError):
        store.complete("k", 1)
    assert store.claim("k").state == "claimed"
    assert store.get("k").claims == 2  # type: ignore[union-attr]


def test_attempt_recorded_from_environment(store: ResultStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILLDRILL_ATTEMPT", "3")
    store.claim("k")
    assert store.get("k").attempt == 3  # type: ignore[union-attr]
    assert store.log(key="k")[0].attempt == 3


def test_in_flight_of_a_live_owner_is_not_taken_over(store: ResultStore) -> None:
    import threading

    results: list[Any] = []
    entered, leave = threading.Event(), threading.Event()

    def slow() -> str:
        entered.set()
        leave.wait(10)
        return "done"

    t = threading.Thread(
        target=lambda: results.append(durable_effect(store, "k", slow, provider_honours_keys=True))
    )
    t.start()
    entered.wait(10)
    calls: list[int] = []
    with pytest.raises(EffectAlreadyInFlight) as err:
        durable_effect(store, "k", lambda: calls.append(1), provider_honours_keys=True)
    assert err.value.owner_alive is True and calls == []
    leave.set()
    t.join()
    # waiting for a live owner returns its result once it is done
    assert durable_effect(store, "k", lambda: calls.append(1), provider_honours_keys=True, wait_s=5) == "done"
    assert results == ["done"] and calls == []


# --------------------------------------------------------------------------- durable_effect


def test_durable_effect_replays_without_calling_the_provider(store: ResultStore) -> None:
    calls: list[int] = []

    def perform() -> dict[str, Any]:
        calls.append(1)
        return {"id": f"ch_{len(calls)}"}

    first = durable_effect(store, "k", perform, provider_honours_keys=True, payload={"a": 1})
    second = durable_effect(store, "k", perform, provider_honours_keys=True, payload={"a": 1})
    assert first == second == {"id": "ch_1"} and calls == [1]


def test_in_flight_left_by_a_dead_attempt(store: ResultStore) -> None:
    store.claim("keyed")
    store.claim("unkeyed")
    _dead_owner(store, "keyed")
    _dead_owner(store, "unkeyed")
    sent: list[str] = []
    # the provider honours keys: re-send with the same key (it replays if the first landed)
    assert (
        durable_effect(store, "keyed", lambda: sent.append("keyed") or "r", provider_honours_keys=True) == "r"
    )
    # it does not: never guess, leave it to reconciliation
    with pytest.raises(EffectAlreadyInFlight) as err:
        durable_effect(store, "unkeyed", lambda: sent.append("unkeyed"), provider_honours_keys=False)
    assert err.value.owner_alive is False
    assert sent == ["keyed"]
    assert [e.event for e in store.log(key="keyed")] == ["claimed", "reclaimed", "succeeded"]


def test_transport_not_sent_releases_other_errors_do_not(store: ResultStore) -> None:
    def unsent() -> None:
        raise TransportNotSent("connection refused")

    with pytest.raises(TransportNotSent):
        durable_effect(store, "a", unsent, provider_honours_keys=False)
    assert store.get("a").status == "released"  # type: ignore[union-attr]

    def ambiguous() -> None:
        raise TimeoutError("read timed out: the charge may have landed")

    with pytest.raises(TimeoutError):
        durable_effect(store, "b", ambiguous, provider_honours_keys=False)
    assert store.get("b").status == "in_flight"  # type: ignore[union-attr]
    # a released key is claimed again and performed
    assert durable_effect(store, "a", lambda: "ok", provider_honours_keys=False) == "ok"


# --------------------------------------------------------------------------- gate


def test_gate_sends_once(store: ResultStore) -> None:
    sent: list[int] = []
    for _ in range(3):
        gate(store, "mail", lambda: sent.append(1) or {"id": "m1"}, reconcile=lambda k: False)
    assert sent == [1]


@pytest.mark.parametrize("delivered", [True, False])
def test_gate_reconciles_a_claim_left_in_flight(store: ResultStore, delivered: bool) -> None:
    store.claim("mail")
    _dead_owner(store, "mail")
    sent: list[int] = []
    looked: list[str] = []

    def lookup(ref: str) -> Any:
        looked.append(ref)
        return {"id": "m0", "ref": ref} if delivered else None

    out = gate(store, "mail", lambda: sent.append(1) or {"id": "m1"}, reconcile=lookup)
    assert looked == ["mail"]
    assert sent == ([] if delivered else [1])
    assert out == ({"id": "m0", "ref": "mail"} if delivered else {"id": "m1"})
    events = [e.event for e in store.log(key="mail")]
    assert events[-1] == ("reconciled" if delivered else "succeeded")


def test_gate_without_reconcile_never_guesses(store: ResultStore) -> None:
    store.claim("mail")
    _dead_owner(store, "mail")
    with pytest.raises(EffectAlreadyInFlight):
        gate(store, "mail", lambda: pytest.fail("sent without knowing"))


# --------------------------------------------------------------------------- saga


def _saga(log: list[str], *, reject: bool, crash_in_compensation: list[bool] | None = None) -> list[SagaStep]:
    def act(name: str) -> Any:
        def action(key: str) -> Any:
            log.append(f"do:{name}")
            if reject and name == "ship":
                raise StepRejected("carrier refused")
            return {"id": f"{name}-1"}

        return action

    def comp(name: str) -> Any:
        def compensate(key: str, result: Any) -> Any:
            if crash_in_compensation and crash_in_compensation[0] and name == "reserve":
                crash_in_compensation[0] = False
                raise RuntimeError("killed mid-compensation")
            log.append(f"undo:{name}:{result['id']}")
            return {"undone": result["id"]}

        return compensate

    return [
        SagaStep("reserve", act("reserve"), comp("reserve")),
        SagaStep("charge", act("charge"), comp("charge"), honours_keys=True, compensate_honours_keys=True),
        SagaStep("ship", act("ship"), comp("ship")),
    ]


def test_saga_completes_and_replays(store: ResultStore) -> None:
    log: list[str] = []
    r1 = run_saga(store, "s1", _saga(log, reject=False))
    r2 = run_saga(store, "s1", _saga(log, reject=False))
    assert r1.results == r2.results and set(r1.results) == {"reserve", "charge", "ship"}
    assert log == ["do:reserve", "do:charge", "do:ship"]


def test_saga_compensates_in_reverse_at_most_once(store: ResultStore) -> None:
    log: list[str] = []
    with pytest.raises(SagaFailed) as err:
        run_saga(store, "s2", _saga(log, reject=True))
    assert err.value.failed_step == "ship" and err.value.compensated == ["charge", "reserve"]
    assert log == ["do:reserve", "do:charge", "do:ship", "undo:charge:charge-1", "undo:reserve:reserve-1"]
    # a resumed attempt goes back to compensating: nothing is done or undone again,
    # and the rejected step is not retried (it might succeed now and leave half a saga)
    with pytest.raises(SagaFailed):
        run_saga(store, "s2", _saga(log, reject=False))
    assert len(log) == 5


def test_saga_resumed_mid_compensation_undoes_the_rest_once(store: ResultStore) -> None:
    log: list[str] = []
    crash = [True]
    with pytest.raises(RuntimeError):
        run_saga(store, "s3", _saga(log, reject=True, crash_in_compensation=crash))
    assert log[-1] == "undo:charge:charge-1"
    # the crashed compensation's claim was left in flight by this thread; it is ambiguous and
    # the compensation (inventory release) honours no key: only a dead owner + reconcile settles it
    with store.engine.begin() as conn:
        conn.execute(store.states.update().where(store.states.c.status == "in_flight").values(owner=_DEAD))
    steps = _saga(log, reject=True)
    steps[0] = SagaStep("reserve", steps[0].action, steps[0].compensate, compensate_reconcile=lambda k: False)
    with pytest.raises(SagaFailed) as err:
        run_saga(store, "s3", steps)
    assert err.value.compensated == ["charge", "reserve"]
    assert log.count("undo:charge:charge-1") == 1 and log.count("undo:reserve:reserve-1") == 1
