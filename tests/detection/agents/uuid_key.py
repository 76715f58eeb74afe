"""Defect: the charge's idempotency key is a fresh uuid4, so a resumed attempt charges again.

A kill after the provider charged and before ``committed:charge`` re-runs the node; the new
key is a new charge to the provider: ``key_changed`` and ``duplicate_effect``.
"""

import uuid

from _kit import Run

run = Run()
amount = run.step("price", lambda: 4200)


def charge() -> str:
    key = f"charge-{uuid.uuid4()}"  # DEFECT: generated inside the node, new on every attempt
    return run.fakes.payments.charge(idempotency_key=key, amount=amount, currency="usd", customer="acme")[
        "id"
    ]


charge_id = run.step("charge", charge)
run.step("record", lambda: run.fakes.kv.set("invoice:acme", {"charge": charge_id, "amount": amount}))
