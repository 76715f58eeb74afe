"""Charges with a stable key; on the resumed attempt its provider stalls (``stall_first``).

DEFECT: after the stall, the next retry gets a 409 "in flight", and the agent takes it as
"already charged" and finishes: the charge never happens and its key stays in flight.
"""

import argparse
import os

import killdrill
from killdrill.fakes import IdempotencyConflict, IndeterminateError, connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
args = p.parse_args()
fakes = connect()
if os.environ.get("KILLDRILL_ATTEMPT") == "2":
    fakes.payments.configure(stall_first=1)  # the provider dies mid-request, once
with killdrill.node("charge"):
    try:
        fakes.payments.charge(idempotency_key=f"{args.thread}:charge", amount=700, account="acme")
    except IdempotencyConflict:
        pass  # DEFECT: "another request is in progress" taken as "done"
    except IndeterminateError:
        raise SystemExit(3) from None  # a timeout: exit and let the supervisor restart us
