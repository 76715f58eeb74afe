"""A newcomer's agent with a JSON checkpoint that holds one run (not keyed by thread): drilled
with a fixed ``--db ckpt.json`` every clean run and case shares it."""

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect

parser = argparse.ArgumentParser()
parser.add_argument("--thread", required=True)
parser.add_argument("--db", required=True)
args = parser.parse_args()

state = {"done": []}
if os.path.exists(args.db):
    with open(args.db) as fh:
        state = json.load(fh)
fakes = connect()
for step in ("charge", "notify"):
    if step in state["done"]:
        continue
    with killdrill.node(step):
        if step == "charge":
            fakes.payments.charge(amount=100, currency="usd", idempotency_key=f"{args.thread}:charge")
        else:
            fakes.webhooks.post(
                url="https://example.com", body={"ok": True}, idempotency_key=f"{args.thread}:hook"
            )
    state["done"].append(step)
    with open(args.db, "w") as fh:
        json.dump(state, fh)
