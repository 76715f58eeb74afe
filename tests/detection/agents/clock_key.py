"""Defect: the charge's idempotency key contains the clock, so a resumed attempt charges again.

``time.time_ns()`` is never the same on the second attempt: ``key_changed``, ``duplicate_effect``.
"""

import time

from _kit import Run

run = Run()
amount = run.step("price", lambda: 1999)


def charge() -> str:
    key = f"charge-acme-{time.time_ns()}"  # DEFECT: the clock, not what the action is
    return run.fakes.payments.charge(idempotency_key=key, amount=amount, currency="eur", customer="acme")[
        "id"
    ]


run.step("charge", charge)
run.step("close", lambda: run.fakes.kv.set("period:acme", "closed"))
