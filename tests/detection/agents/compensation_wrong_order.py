"""Defect: a saga compensates its steps in the order they ran, not in reverse.

Reserve stock, then charge; shipping is refused, so both are undone, each at most once
through the effect store, but the reservation is released before the charge is refunded
(stock freed for another buyer while this one still holds a charge).  Every effect still
lands exactly once; the only thing wrong is the order.
"""

from _kit import Run

from killdrill.effects import durable_effect, gate, idempotency_key

run = Run()
inventory, payments = run.fakes.inventory, run.fakes.payments


def key(node: str) -> str:
    return idempotency_key(run.thread, node, 0, {"order": "o-9"})


def reserve() -> str:
    ref = key("reserve")
    reconcile = lambda k: (run.fakes.ledger.effects("inventory", ref=k) or [None])[0]  # noqa: E731
    return gate(run.store(), ref, lambda: inventory.reserve(sku="lamp", qty=1, ref=ref), reconcile=reconcile)[
        "id"
    ]


def charge() -> str:
    k = key("charge")
    pay = lambda: payments.charge(idempotency_key=k, amount=5900, customer="acme")  # noqa: E731
    return durable_effect(run.store(), k, pay, provider_honours_keys=True)["id"]


def release(reservation: str) -> str:
    def done(_: str) -> dict | None:
        found = inventory.get(reservation)
        return found if found and found["releases"] > 0 else None

    return gate(run.store(), key("release"), lambda: inventory.release(reservation), reconcile=done)["id"]


def refund(charge_id: str) -> str:
    k = key("refund")
    undo = lambda: payments.refund(charge_id, idempotency_key=k)  # noqa: E731
    return durable_effect(run.store(), k, undo, provider_honours_keys=True)["id"]


reservation = run.step("reserve", reserve)
charge_id = run.step("charge", charge)
shipped = run.step("ship", lambda: {"ok": False, "reason": "address undeliverable"})
if not shipped["ok"]:
    run.step("undo_reserve", lambda: release(reservation))  # DEFECT: should come after the refund
    run.step("undo_charge", lambda: refund(charge_id))
