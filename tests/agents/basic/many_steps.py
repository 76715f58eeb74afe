"""An agent with ``--steps N`` named steps: a catalogue of N nodes (3N kill points) for the
growth benchmark.  Each step charges one payee under a stable key and checkpoints.
"""

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--ckpt", required=True)
p.add_argument("--steps", type=int, default=10)
args = p.parse_args()

state = {"done": 0}
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        state = json.load(f)
fakes = connect()
while state["done"] < args.steps:
    i = state["done"]
    with killdrill.node(f"step_{i:04d}"):
        fakes.payments.charge(idempotency_key=f"{args.thread}:step-{i}", account=f"a-{i}", amount=100 + i)
    state["done"] = i + 1
    with open(args.ckpt + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.ckpt + ".tmp", args.ckpt)
