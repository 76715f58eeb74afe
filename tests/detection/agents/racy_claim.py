"""Defect: the effect store claims a key by reading, then inserting (a window between them).

Correct under one resumer.  Two resumers of the same thread at once (a redelivered job, two
workers) both read "no claim", both insert, both send: ``duplicate_effect``.  Drilled with
``resumers=2`` in lockstep, so the window is hit on purpose, not by luck.
"""

from _kit import Run

from killdrill.effects import gate, idempotency_key

run = Run()
order = run.step("load_order", lambda: {"order": "o-42", "to": "bob@example.com"})


def notify() -> str:
    store = run.store(claim_strategy="read_then_insert")  # DEFECT: read-then-insert claim
    ref = idempotency_key(run.thread, "notify", 0, order)
    mailbox = run.fakes.mailbox
    sent = gate(
        store,
        ref,
        lambda: mailbox.send(
            to=order["to"], subject="Your order", body=f"{order['order']} is on its way", ref=ref
        ),
        reconcile=mailbox.lookup,
        thread=run.thread,
        node="notify",
        payload=order,
        wait_s=10,
    )
    return sent["id"]


run.step("notify", notify)
