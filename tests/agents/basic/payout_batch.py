"""A payout batch: pays ``--n`` payees once each, under stable keys, checkpointing per batch.

The shape the verdict's growth is measured on: one ``payments.charge`` per payee with the key
``{thread}:{payee}``, progress checkpointed after each batch of ``--batch`` payees (a resumed
attempt replays the unfinished batch, the keys make the replays harmless).  ``--stamp`` adds a
run id to every payload, drawn once per thread and checkpointed: it differs between two clean
runs (a volatile field, so no two runs' payloads are identical) but never within one.
"""

import argparse
import json
import os
import uuid

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--ckpt", required=True)
p.add_argument("--n", type=int, default=100)
p.add_argument("--batch", type=int, default=50)
p.add_argument("--stamp", action="store_true")
args = p.parse_args()

state = {"done": 0, "run": uuid.uuid4().hex}
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        state = json.load(f)
else:  # the run id is part of the durable state before the first payment
    with open(args.ckpt + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.ckpt + ".tmp", args.ckpt)
fakes = connect()
while state["done"] < args.n:
    start = state["done"]
    end = min(args.n, start + args.batch)
    with killdrill.node("pay_batch"):
        for i in range(start, end):
            payee = f"payee-{i:06d}"
            extra = {"run": state["run"]} if args.stamp else {}
            fakes.payments.charge(
                idempotency_key=f"{args.thread}:{payee}", account=payee, amount=1000 + i % 97, **extra
            )
    state["done"] = end
    with open(args.ckpt + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.ckpt + ".tmp", args.ckpt)
