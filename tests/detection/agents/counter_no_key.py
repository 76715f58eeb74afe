"""Defect: a metrics counter is incremented without a key, inside a checkpointed node.

The increment is not idempotent; a kill after it and before ``committed:count`` counts the
same invoice twice: ``duplicate_effect`` on ``counter.increment``.
"""

from _kit import Run

from killdrill.effects import idempotency_key

run = Run()
invoice = run.step("issue", lambda: {"invoice": "inv-3", "amount": 990})


def record() -> str:
    run.fakes.kv.set(f"invoice:{invoice['invoice']}", invoice)
    return "stored"


def count() -> int:
    return run.fakes.counter.increment("invoices_issued")["value"]  # DEFECT: no idempotency_key


run.step("record", record)
run.step("count", count)
key = idempotency_key(run.thread, "announce", 0, invoice)
run.step("announce", lambda: run.fakes.webhooks.post(idempotency_key=key, event="issued", **invoice)["id"])
