"""Defect: the agent's checkpoint is taken as the truth of the provider's state.

To "never charge twice", the agent marks the charge done in its checkpoint first and skips it
on resume whenever the mark is there.  A kill between the mark and the charge leaves the mark
and no charge: the resumed attempt skips it and the customer is never charged:
``missing_effect``.  (Only the provider knows; reconcile with ``payments.lookup(key)``.)
"""

from _kit import Run

import killdrill
from killdrill.effects import idempotency_key

run = Run()
amount = run.step("price", lambda: 3100)
key = idempotency_key(run.thread, "charge", 0, {"customer": "acme", "amount": amount})
if run.load("charge_marked") is None:  # DEFECT: our own record says whether the charge happened
    with killdrill.node("charge"):
        run.save("charge_marked", {"key": key})
        run.fakes.payments.charge(idempotency_key=key, amount=amount, customer="acme")
run.step("book", lambda: run.fakes.kv.set("booked:acme", amount))
