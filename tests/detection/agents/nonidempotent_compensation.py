"""Defect: a saga's compensation (release the reservation) is not idempotent.

The reservation is made once (gated, reconciled by its ref); the order is then declined and
the reservation released by a plain call.  A kill after the partner released it and before
``committed:compensate`` releases it again on resume: ``duplicate_effect`` on
``inventory.release`` (a partner API with no key header cannot dedupe it).
"""

from _kit import Run

from killdrill.effects import gate, idempotency_key

run = Run()
inventory = run.fakes.inventory


def reserve() -> str:
    ref = idempotency_key(run.thread, "reserve", 0, {"sku": "widget", "qty": 2})
    found = gate(
        run.store(),
        ref,
        lambda: inventory.reserve(sku="widget", qty=2, ref=ref),
        reconcile=lambda k: (run.fakes.ledger.effects("inventory", ref=k) or [None])[0],
    )
    return found["id"]


reservation = run.step("reserve", reserve)
decision = run.step("credit_check", lambda: {"approved": False, "reason": "card declined"})
if not decision["approved"]:
    run.step("compensate", lambda: inventory.release(reservation)["id"])  # DEFECT: not gated
