"""Defect: an outgoing webhook is posted without an idempotency key.

A kill after the receiver got it and before ``committed:announce`` posts it again: the
partner sees two ``invoice.paid`` events: ``duplicate_effect`` on ``webhooks.post``.
"""

from _kit import Run

run = Run()
invoice = run.step("close_invoice", lambda: {"invoice": "inv-77", "amount": 4100})


def announce() -> str:
    # DEFECT: no idempotency_key= on a non-idempotent delivery
    return run.fakes.webhooks.post(
        event="invoice.paid", invoice=invoice["invoice"], amount=invoice["amount"]
    )["id"]


run.step("announce", announce)
