"""Defect: a claim whose fate is unknown is released, as if the request had never left.

A kill at ``during:mailbox.send`` leaves the claim in flight: the email may have gone.
``gate`` refuses to guess (no reconcile given); this agent catches that, releases the claim
and sends again, so the customer gets two emails: ``duplicate_effect``.
"""

from _kit import Run

from killdrill.effects import EffectAlreadyInFlight, gate, idempotency_key

run = Run()
order = run.step("load_order", lambda: {"order": "o-17", "to": "ann@example.com"})


def notify() -> str:
    store = run.store()
    ref = idempotency_key(run.thread, "notify", 0, order)
    mailbox = run.fakes.mailbox

    def send() -> dict:
        return mailbox.send(
            to=order["to"], subject="Order shipped", body=f"{order['order']} shipped", ref=ref
        )

    try:
        sent = gate(store, ref, send)
    except EffectAlreadyInFlight:
        store.release(ref)  # DEFECT: "in flight" is ambiguous (maybe delivered), not "never sent"
        sent = gate(store, ref, send)
    return sent["id"]


run.step("notify", notify)
