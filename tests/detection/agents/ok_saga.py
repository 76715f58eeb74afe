"""Correct: a saga through ``run_saga``: reserve, charge, ship; shipping is refused, so the
charge is refunded and the reservation released, in reverse order, each at most once.

The reservation (a partner API with no key) is reconciled by its ref; its release by the
reservation's release count; the charge and the refund honour keys.
"""

from _kit import Run

from killdrill.effects import SagaFailed, SagaStep, StepRejected, run_saga

run = Run()
inventory, payments = run.fakes.inventory, run.fakes.payments


def reserve(key: str) -> dict:
    return inventory.reserve(sku="lamp", qty=1, ref=key)


def reserved(key: str) -> object:
    return (run.fakes.ledger.effects("inventory", ref=key) or [None])[0]


def release(key: str, reservation: dict) -> dict:
    return inventory.release(reservation["id"])


def released(key: str) -> bool:
    return any(e.get("releases", 0) > 0 for e in run.fakes.ledger.effects("inventory"))


def ship(key: str) -> dict:
    raise StepRejected("carrier refused: address undeliverable")


steps = [
    SagaStep("reserve", reserve, release, reconcile=reserved, compensate_reconcile=released),
    SagaStep(
        "charge",
        lambda k: payments.charge(idempotency_key=k, amount=5900, customer="acme"),
        lambda k, c: payments.refund(c["id"], idempotency_key=k),
        honours_keys=True,
        compensate_honours_keys=True,
    ),
    # The carrier honours keys: a ship request left in flight by a kill is re-sent under its key.
    # (Without this, a kill between the step's claim and its refusal leaves the claim stuck in
    # flight for ever: the random chaos runs found that, no named point sits in that window.)
    SagaStep("ship", ship, honours_keys=True),
]


def order() -> dict:
    try:
        return {"ok": True, "results": run_saga(run.store(), f"{run.thread}:order-1", steps).results}
    except SagaFailed as exc:
        return {"ok": False, "failed": exc.failed_step, "compensated": exc.compensated}


run.step("order", order)
