"""Many points in one run: ``--steps`` steps, each a charge under a stable key, checkpointed
after each step.  Prints what ``KILLDRILL_WAIT_AT`` said at start, so a test sees which points
the supervisor asked it to wait at.  ``--claim-no-wait`` overwrites that variable with ``[]``
before the first point: an agent (or an old bootstrap) that does not wait where it must be
killed, which the supervisor has to refuse, never pass.  ``--burst N`` ends with N points in a
tight loop and exits at once: more than the supervisor reads before it sees the exit.
"""

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--ckpt", required=True)
p.add_argument("--steps", type=int, default=200)
p.add_argument("--claim-no-wait", action="store_true")
p.add_argument("--burst", type=int, default=0, help="points passed in a tight loop at the end")
args = p.parse_args()

print("wait-at:", os.environ.get("KILLDRILL_WAIT_AT"), flush=True)
if args.claim_no_wait:
    os.environ["KILLDRILL_WAIT_AT"] = "[]"
state = {"done": 0}
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        state = json.load(f)
fakes = connect()
for i in range(state["done"], args.steps):
    with killdrill.node("step"):
        fakes.payments.charge(idempotency_key=f"{args.thread}:{i}", account=f"acct-{i}", amount=100 + i)
    state["done"] = i + 1
    with open(args.ckpt + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.ckpt + ".tmp", args.ckpt)
for _ in range(args.burst):
    killdrill.boundary("after:burst")
