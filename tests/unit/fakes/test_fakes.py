"""The in-process fakes: each effect class's semantics, faults, ordering, durability, races."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import killdrill.fakes.handle as fakes_handle
from killdrill.fakes import (
    FakeProviderError,
    Fakes,
    IdempotencyConflict,
    IdempotencyError,
    IndeterminateError,
    InjectedFault,
    connect,
)
from killdrill.ledger import Ledger
from killdrill.records import CONFLICT, CREATED, FAILED, REJECTED, REPLAYED

FORK = multiprocessing.get_context("fork")


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    return connect(str(tmp_path / "ledger.sqlite"), thread="t", attempt=1)


def outcomes(fakes: Fakes, provider: str | None = None) -> list[str]:
    return [c.outcome for c in fakes.ledger.calls(provider)]


# -- payments ---------------------------------------------------------------------------------
def test_charge_same_key_same_payload_replays(fakes: Fakes) -> None:
    first = fakes.payments.charge(idempotency_key="k1", amount=1000, currency="usd", meta={"a": 1, "b": 2})
    again = fakes.payments.charge(meta={"b": 2, "a": 1}, currency="usd", amount=1000, idempotency_key="k1")
    assert first["id"] == again["id"] == "ch_0001"
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert first["amount"] == 1000 and first["status"] == "succeeded"
    calls = fakes.payments.calls()
    assert [c.outcome for c in calls] == [CREATED, REPLAYED]
    assert calls[1].replayed and calls[1].effect_id == "ch_0001" and not calls[1].landed
    assert len(fakes.ledger.effects("payments")) == 1


def test_charge_same_key_other_payload_is_rejected(fakes: Fakes) -> None:
    fakes.payments.charge(idempotency_key="k1", amount=1000)
    with pytest.raises(IdempotencyError) as info:
        fakes.payments.charge(idempotency_key="k1", amount=999)
    assert info.value.call is not None and info.value.call.outcome == REJECTED
    assert info.value.status == 400 and info.value.type == "idempotency_error"
    # Same key on another operation of the provider is a reuse too.
    with pytest.raises(IdempotencyError):
        fakes.payments.refund("ch_0001", idempotency_key="k1")
    assert outcomes(fakes) == [CREATED, REJECTED, REJECTED]
    assert len(fakes.ledger.effects("payments")) == 1


def test_charge_without_key_charges_every_time(fakes: Fakes) -> None:
    a = fakes.payments.charge(amount=5)
    b = fakes.payments.charge(amount=5)
    assert a["id"] != b["id"]
    assert outcomes(fakes) == [CREATED, CREATED]
    assert [c.key for c in fakes.ledger.calls()] == [None, None]


def test_key_in_flight_is_a_conflict(fakes: Fakes) -> None:
    # The HTTP server holds a request between claiming its key and executing it.
    with fakes.ledger.transaction() as tx:
        tx.claim_key("payments", "k1", "charge", {"amount": 1}, attempt=1)
    with pytest.raises(IdempotencyConflict) as info:
        fakes.payments.charge(idempotency_key="k1", amount=1)
    assert info.value.status == 409
    assert outcomes(fakes) == [CONFLICT]
    assert fakes.payments.lookup("k1") is None
    assert [f.key for f in fakes.ledger.snapshot().in_flight] == ["k1"]


def test_lookup_and_refund(fakes: Fakes) -> None:
    assert fakes.payments.lookup("nope") is None
    charge = fakes.payments.charge(idempotency_key="k1", amount=700, currency="eur")
    assert fakes.payments.lookup("k1")["id"] == charge["id"]
    refund = fakes.payments.refund(charge["id"], idempotency_key="r1")
    assert refund["object"] == "refund" and refund["amount"] == 700
    assert fakes.payments.refund(charge["id"], idempotency_key="r1")["replayed"] is True
    assert fakes.payments.lookup("k1")["refunded"] is True
    with pytest.raises(FakeProviderError, match="already been refunded"):
        fakes.payments.refund(charge["id"])  # unkeyed second refund: refused, as Stripe does
    with pytest.raises(FakeProviderError, match="No such charge"):
        fakes.payments.refund("ch_9999")
    assert outcomes(fakes) == [CREATED, CREATED, REPLAYED, REJECTED, REJECTED]


def test_expired_key_is_forgotten(fakes: Fakes) -> None:
    fakes.payments.configure(key_ttl=0.05)
    fakes.payments.charge(idempotency_key="k1", amount=1)
    time.sleep(0.1)
    fakes.payments.charge(idempotency_key="k1", amount=1)
    assert outcomes(fakes) == [CREATED, CREATED]


# -- the other effect classes -----------------------------------------------------------------
def test_tickets_and_webhooks_fire_every_time_unless_keyed(fakes: Fakes) -> None:
    t1 = fakes.tickets.create(title="disk full")
    t2 = fakes.tickets.create(title="disk full")
    t3 = fakes.tickets.create(title="disk full", idempotency_key="t")
    t4 = fakes.tickets.create(title="disk full", idempotency_key="t")
    assert len({t1["id"], t2["id"], t3["id"]}) == 3 and t4["id"] == t3["id"] and t4["replayed"]
    w1 = fakes.webhooks.post(url="https://x/hook", event="paid")
    w2 = fakes.webhooks.post(url="https://x/hook", event="paid")
    assert w1["id"] != w2["id"] and w1["delivered"]
    assert outcomes(fakes, "tickets") == [CREATED, CREATED, CREATED, REPLAYED]
    assert outcomes(fakes, "webhooks") == [CREATED, CREATED]


def test_counter_increments_twice_without_key_once_with(fakes: Fakes) -> None:
    assert fakes.counter.increment("n")["value"] == 1
    assert fakes.counter.increment("n", by=2)["value"] == 3
    assert fakes.counter.increment("n", by=10, idempotency_key="x")["value"] == 13
    replay = fakes.counter.increment("n", by=10, idempotency_key="x")
    assert replay["value"] == 13 and replay["replayed"]
    assert fakes.counter.get("n") == 13 and fakes.counter.get("other") == 0


def test_kv_converges_and_is_the_snapshot_state(fakes: Fakes) -> None:
    fakes.kv.set("status", "paid")
    fakes.kv.set("status", "paid")
    fakes.kv.set("total", {"eur": 7})
    assert fakes.kv.get("status") == "paid" and fakes.kv.get("missing", 0) == 0
    assert fakes.ledger.snapshot().state == {"status": "paid", "total": {"eur": 7}}
    assert [c.effect_id for c in fakes.kv.calls()] == ["status", "status", "total"]


def test_mailbox_dedupes_nothing_and_lookup_finds_by_ref(fakes: Fakes) -> None:
    assert fakes.mailbox.lookup("inv-1") is None
    m1 = fakes.mailbox.send(to="a@x", subject="Receipt", body="paid", ref="inv-1")
    m2 = fakes.mailbox.send(to="a@x", subject="Receipt", body="paid", ref="inv-1")
    assert m1["id"] != m2["id"]
    found = fakes.mailbox.lookup("inv-1")
    assert found is not None and found["id"] == m1["id"] and found["deliveries"] == 2
    assert outcomes(fakes, "mailbox") == [CREATED, CREATED]


def test_inventory_second_release_is_recorded_again(fakes: Fakes) -> None:
    res = fakes.inventory.reserve("sku-1", 2, ref="order-9")
    assert res["status"] == "reserved"
    fakes.inventory.release(res["id"])
    again = fakes.inventory.release(res["id"])
    assert again["releases"] == 2
    releases = fakes.inventory.calls("release")
    assert [c.outcome for c in releases] == [CREATED, CREATED]
    assert releases[0].effect_id == releases[1].effect_id == res["id"]
    with pytest.raises(FakeProviderError, match="No such reservation"):
        fakes.inventory.release("res_9999")


# -- faults -----------------------------------------------------------------------------------
def test_fail_first_fails_before_anything_happens(tmp_path: Path) -> None:
    url = str(tmp_path / "l.sqlite")
    connect(url, thread="t").payments.configure(fail_first=2)
    fakes = connect(url, thread="t")  # a restarted agent: the budget lives in the ledger
    for _ in range(2):
        with pytest.raises(InjectedFault):
            fakes.payments.charge(idempotency_key="k", amount=1)
    assert fakes.payments.charge(idempotency_key="k", amount=1)["replayed"] is False
    assert outcomes(fakes) == [FAILED, FAILED, CREATED]
    assert fakes.ledger.settings("payments")["fail_first"] == 0


def test_error_first_is_stored_and_replayed_for_its_key(fakes: Fakes) -> None:
    fakes.payments.configure(error_first=1)
    with pytest.raises(InjectedFault):
        fakes.payments.charge(idempotency_key="k", amount=1)
    with pytest.raises(InjectedFault):  # Stripe replays the first response, a 500 included
        fakes.payments.charge(idempotency_key="k", amount=1)
    assert fakes.payments.charge(idempotency_key="k2", amount=1)["id"] == "ch_0001"
    assert outcomes(fakes) == [FAILED, REPLAYED, CREATED]


def test_indeterminate_effect_happened_and_the_key_replays_it(fakes: Fakes) -> None:
    fakes.payments.configure(indeterminate_first=1, drop_first=1)
    with pytest.raises(IndeterminateError) as info:
        fakes.payments.charge(idempotency_key="k", amount=1)
    assert info.value.call is not None and info.value.call.effect_id == "ch_0001"
    with pytest.raises(IndeterminateError):  # a drop, in-process: the answer is lost the same way
        fakes.payments.charge(amount=2)
    assert fakes.payments.charge(idempotency_key="k", amount=1)["replayed"] is True
    assert outcomes(fakes) == [CREATED, CREATED, REPLAYED]


def test_unknown_fault_setting_is_a_type_error(fakes: Fakes) -> None:
    with pytest.raises(TypeError, match="fail_frist"):
        fakes.payments.configure(fail_frist=1)


# -- connect() and the during: point ----------------------------------------------------------
def test_connect_reads_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILLDRILL_LEDGER", str(tmp_path / "env.sqlite"))
    monkeypatch.setenv("KILLDRILL_THREAD", "thread-7")
    monkeypatch.setenv("KILLDRILL_ATTEMPT", "4")
    fakes = connect()
    fakes.kv.set("a", 1)
    (call,) = Ledger(str(tmp_path / "env.sqlite"), "thread-7").calls()
    assert call.attempt == 4 and fakes.thread == "thread-7"


def test_connect_outside_a_drill_uses_a_temporary_ledger(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    code = textwrap.dedent(
        """
        import os
        from killdrill.fakes import connect
        f = connect()
        f.payments.charge(amount=1)
        print(f.ledger.path, len(f.ledger.calls()), f.thread, f.attempt)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path, n, thread, attempt = out.stdout.split()
    assert (n, thread, attempt) == ("1", "default", "1")
    assert not os.path.exists(path)  # removed when the process exited


def test_during_is_announced_after_the_record_is_committed(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, list[str]]] = []

    def spy(point: str) -> None:
        # Read through a second, independent ledger handle: only committed rows are visible.
        other = Ledger(fakes.ledger.url, fakes.thread)
        seen.append((point, [f"{c.provider}.{c.op}:{c.outcome}" for c in other.calls()]))

    monkeypatch.setattr(fakes_handle, "boundary", spy)
    fakes.mailbox.send(to="a", subject="s", body="b")
    fakes.payments.charge(idempotency_key="k", amount=1)
    with pytest.raises(IdempotencyError):
        fakes.payments.charge(idempotency_key="k", amount=2)
    assert seen == [
        ("during:mailbox.send", ["mailbox.send:created"]),
        ("during:payments.charge", ["mailbox.send:created", "payments.charge:created"]),
        (
            "during:payments.charge",
            ["mailbox.send:created", "payments.charge:created", "payments.charge:rejected"],
        ),
    ]


# -- durability and races across processes ----------------------------------------------------
def test_a_call_survives_an_immediate_sigkill(tmp_path: Path) -> None:
    url = str(tmp_path / "l.sqlite")
    code = textwrap.dedent(
        f"""
        import os, signal
        from killdrill.fakes import connect
        f = connect({url!r}, thread="t", attempt=1)
        f.payments.charge(idempotency_key="k", amount=42)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == -9
    (call,) = Ledger(url, "t").calls()
    assert (call.outcome, call.key, call.payload, call.pid != os.getpid()) == (
        CREATED,
        "k",
        {"amount": 42},
        True,
    )
    # The resumed agent's retry with the same key replays the charge the killed one made.
    assert connect(url, thread="t", attempt=2).payments.charge(idempotency_key="k", amount=42)["replayed"]


def _charge_at_once(
    url: str, thread: str, barrier: multiprocessing.synchronize.Barrier, q: multiprocessing.Queue
) -> None:
    fakes = connect(url, thread=thread, attempt=1)
    barrier.wait()
    q.put(fakes.payments.charge(idempotency_key="same", amount=10, currency="usd")["id"])


def _same_key_race(url: str, thread: str, procs: int = 6) -> None:
    barrier, q = FORK.Barrier(procs), FORK.Queue()
    workers = [FORK.Process(target=_charge_at_once, args=(url, thread, barrier, q)) for _ in range(procs)]
    for w in workers:
        w.start()
    ids = [q.get(timeout=30) for _ in workers]
    for w in workers:
        w.join(30)
    assert [w.exitcode for w in workers] == [0] * procs
    assert set(ids) == {"ch_0001"}
    calls = Ledger(url, thread).calls("payments")
    assert sorted(c.outcome for c in calls) == [CREATED] + [REPLAYED] * (procs - 1)
    assert len(Ledger(url, thread).effects("payments")) == 1


def test_same_key_from_several_processes_at_once_sqlite(tmp_path: Path) -> None:
    _same_key_race(str(tmp_path / "l.sqlite"), "t")


@pytest.mark.postgres
def test_same_key_from_several_processes_at_once_postgres(postgres_url: str, unique_thread: str) -> None:
    _same_key_race(postgres_url, unique_thread)


@pytest.mark.postgres
def test_fakes_on_postgres(postgres_url: str, unique_thread: str) -> None:
    fakes = connect(postgres_url, thread=unique_thread)
    fakes.payments.configure(fail_first=1)
    with pytest.raises(InjectedFault):
        fakes.payments.charge(idempotency_key="k", amount=1)
    fakes.payments.charge(idempotency_key="k", amount=1)
    fakes.payments.charge(idempotency_key="k", amount=1)
    res = fakes.inventory.reserve("s", 1, ref="o")
    fakes.inventory.release(res["id"])
    fakes.inventory.release(res["id"])
    fakes.mailbox.send(to="a", subject="s", body="b", ref="r")
    assert fakes.mailbox.lookup("r")["deliveries"] == 1
    assert outcomes(fakes) == [FAILED, CREATED, REPLAYED, CREATED, CREATED, CREATED, CREATED]


def test_stall_leaves_the_key_in_flight_and_nothing_done(tmp_path) -> None:
    from killdrill.fakes import IdempotencyConflict, IndeterminateError

    fakes = connect(str(tmp_path / "l.sqlite"), thread="t")
    fakes.payments.configure(stall_first=1)
    with pytest.raises(IndeterminateError):
        fakes.payments.charge(idempotency_key="k", amount=5)
    with pytest.raises(IdempotencyConflict):
        fakes.payments.charge(idempotency_key="k", amount=5)
    snap = fakes.ledger.snapshot()
    assert [f.key for f in snap.in_flight] == ["k"]
    assert [c.outcome for c in snap.calls] == ["failed", "conflict"]
    assert fakes.payments.lookup("k") is None
