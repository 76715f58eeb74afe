"""Checkout, version 2, UNSAFE upgrade: the node ``charge`` is renamed ``charge_card``.

The key is derived from the node's name, so it changes with it, and version 1's checkpoint
says ``charge`` is done, which version 2 does not recognise: resuming a run that version 1
started charges the card again.
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


def charge_card(state):
    key = idempotency_key(args.thread, "charge_card", 1, ORDER)  # the new name: a new key
    return fakes.payments.charge(idempotency_key=key, **ORDER)["id"]


def send_receipt(state):
    ref = f"{args.thread}:receipt"
    if fakes.mailbox.lookup(ref) is None:
        fakes.mailbox.send(to="billing@acme.example", subject="Receipt", body="Charged 42.00 USD.", ref=ref)
    return ref


for name, step in [("charge_card", charge_card), ("send_receipt", send_receipt)]:
    if name in state["done"]:
        continue
    with killdrill.node(name):
        state[name] = step(state)
    state["done"].append(name)
    with open(args.db + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.db + ".tmp", args.db)
    killdrill.boundary(f"committed:{name}")
