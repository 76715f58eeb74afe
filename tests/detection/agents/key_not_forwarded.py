"""Defect: the effect store claims a stable key, but the key is not forwarded to the provider.

``durable_effect`` re-sends a claim left in flight by a killed attempt, trusting the provider
to replay the key; the charge request carries no key, so the provider charges again:
``duplicate_effect`` after a kill at ``during:payments.charge``.
"""

from _kit import Run

from killdrill.effects import durable_effect, idempotency_key

run = Run()
amount = run.step("price", lambda: 7300)


def charge() -> str:
    payload = {"amount": amount, "customer": "acme"}
    key = idempotency_key(run.thread, "charge", 0, payload)
    result = durable_effect(
        run.store(),
        key,
        lambda: run.fakes.payments.charge(**payload),  # DEFECT: idempotency_key=key not passed on
        provider_honours_keys=True,
        thread=run.thread,
        node="charge",
        payload=payload,
    )
    return result["id"]


run.step("charge", charge)
run.step("book", lambda: run.fakes.kv.set("ledger:acme", amount))
