"""Checkout, version 1: charge the card, then email the receipt; each step checkpointed.

Drilled with an upgrade (``--resume-with -- python checkout_v2_*.py ...``): version 1 is
killed mid-run, version 2 resumes its checkpoint.
"""

import argparse
import json
import os

import killdrill
from killdrill.effects import idempotency_key
from killdrill.fakes import connect

parser = argparse.ArgumentParser()
parser.add_argument("--thread", required=True)
parser.add_argument("--db", required=True)
args = parser.parse_args()

fakes = connect()
state = {"done": []}
if os.path.exists(args.db):
    with open(args.db) as f:
        state = json.load(f)

ORDER = {"amount": 4200, "currency": "usd", "customer": "acme"}


def charge(state):
    key = idempotency_key(args.thread, "charge", 1, ORDER)  # derived from the node's name
    return fakes.payments.charge(idempotency_key=key, **ORDER)["id"]


def send_receipt(state):
    ref = f"{args.thread}:receipt"
    if fakes.mailbox.lookup(ref) is None:
        fakes.mailbox.send(to="billing@acme.example", subject="Receipt", body="Charged 42.00 USD.", ref=ref)
    return ref


for name, step in [("charge", charge), ("send_receipt", send_receipt)]:
    if name in state["done"]:
        continue
    with killdrill.node(name):
        state[name] = step(state)
    state["done"].append(name)
    with open(args.db + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.db + ".tmp", args.db)
    killdrill.boundary(f"committed:{name}")
