"""Defect: an irreversible email is sent in the middle of a node, before a step that can re-run.

``settle`` emails the confirmation, then charges (keyed, replay-safe), then commits.  A kill
anywhere after the email and before ``committed:settle`` re-runs the whole node: the charge
replays, the email cannot: ``duplicate_effect`` on ``mailbox.send``.  (Irreversible actions
belong last, behind a gate.)
"""

from _kit import Run

from killdrill.effects import idempotency_key

run = Run()
amount = run.step("price", lambda: 2500)


def settle() -> str:
    run.fakes.mailbox.send(
        to="ann@example.com", subject="Payment confirmed", body=f"{amount} cents"
    )  # DEFECT
    key = idempotency_key(run.thread, "settle", 0, {"customer": "ann", "amount": amount})
    return run.fakes.payments.charge(idempotency_key=key, amount=amount, customer="ann")["id"]


run.step("settle", settle)
run.step("archive", lambda: run.fakes.kv.set("order:ann", "settled"))
