"""A three-step agent with a JSON checkpoint; ``--bug nokey`` charges without a key.

Correct form: the charge carries a key derived from the thread, so a resumed attempt
replays it; the checkpoint is written after each step.
"""

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--ckpt", required=True)
p.add_argument("--bug", default="")
args = p.parse_args()

state = {"step": 0}
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        state = json.load(f)
fakes = connect()
for i, name in enumerate(["decide", "charge", "record"]):
    if i < state["step"]:
        continue
    with killdrill.node(name):
        if name == "decide":
            state["amount"] = 4200
        elif name == "charge":
            key = None if args.bug == "nokey" else f"{args.thread}:charge"
            fakes.payments.charge(idempotency_key=key, amount=state["amount"], account="acme")
        else:
            fakes.kv.set(f"invoice:{args.thread}", {"amount": state["amount"], "status": "paid"})
    state["step"] = i + 1
    with open(args.ckpt + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.ckpt + ".tmp", args.ckpt)
