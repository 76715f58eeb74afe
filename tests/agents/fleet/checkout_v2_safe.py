"""Checkout, version 2, SAFE upgrade: the node is renamed ``charge_card``, and nothing else moves.

The idempotency key keeps the effect's old name (it names the charge, not the code), and a
checkpoint written by version 1 is migrated on load: its ``charge`` is this version's
``charge_card``.
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

RENAMED = {"charge": "charge_card"}  # version 1's step names -> this version's

fakes = connect()
state = {"done": []}
if os.path.exists(args.db):
    with open(args.db) as f:
        state = json.load(f)
    state["done"] = [RENAMED.get(name, name) for name in state["done"]]
    for old, new in RENAMED.items():
        if old in state:
            state[new] = state.pop(old)

ORDER = {"amount": 4200, "currency": "usd", "customer": "acme"}


def charge_card(state):
    key = idempotency_key(args.thread, "charge", 1, ORDER)  # the effect's name, stable across versions
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
