"""Defect: the receipt is emailed before the charge's outcome is committed to the checkpoint.

The charge is keyed and goes through the effect store (correct); the receipt follows in the
same node, before ``committed:charge``.  A kill between the receipt and the commit re-runs
the node: the charge replays from the store, the receipt is mailed again:
``duplicate_effect`` on ``mailbox.send``.
"""

from _kit import Run

from killdrill.effects import durable_effect, idempotency_key

run = Run()
amount = run.step("price", lambda: 8800)


def charge() -> dict:
    key = idempotency_key(run.thread, "charge", 0, {"customer": "acme", "amount": amount})
    pay = lambda: run.fakes.payments.charge(idempotency_key=key, amount=amount, customer="acme")  # noqa: E731
    result = durable_effect(run.store(), key, pay, provider_honours_keys=True)
    body = f"We charged {amount} cents ({result['id']})"
    run.fakes.mailbox.send(to="billing@acme.example", subject="Receipt", body=body)  # DEFECT: before commit
    return {"charge": result["id"]}


run.step("charge", charge)
