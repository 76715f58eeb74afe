"""Drains on SIGTERM: finishes the step in progress, commits its checkpoint, exits 75.

``--ignore-term`` ignores SIGTERM instead and takes 0.5 s a step: the supervisor must kill it
after the grace period.  ``--burst N``: on the way out of a drain, N points in a tight loop
(what a draining agent passes after SIGTERM must be traced).
"""

import argparse
import json
import os
import signal
import sys
import time

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--ckpt", required=True)
p.add_argument("--ignore-term", action="store_true")
p.add_argument("--burst", type=int, default=0)
args = p.parse_args()

drain = False


def on_term(signum, frame):
    global drain
    drain = True


signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else on_term)
state = {"step": 0}
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        state = json.load(f)
fakes = connect()
for i, name in enumerate(["a", "b", "c"]):
    if i < state["step"]:
        continue
    if drain:
        for _ in range(args.burst):
            killdrill.boundary("after:burst")
        sys.exit(75)  # drained: the last completed step is committed
    with killdrill.node(name):
        fakes.tickets.create(idempotency_key=f"{args.thread}:{name}", title=name)
        if args.ignore_term:
            time.sleep(0.5)
    state["step"] = i + 1
    with open(args.ckpt + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.ckpt + ".tmp", args.ckpt)
