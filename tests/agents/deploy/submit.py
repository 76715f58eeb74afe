"""The queue's starter (the driver): submits the task unless it is already queued, claimed or
done, and waits for it to be done; re-run after a kill, it attaches to the same task."""

import argparse
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--queue", required=True)
p.add_argument("--task", required=True)
args = p.parse_args()
for d in ("todo", "claimed", "done"):
    os.makedirs(os.path.join(args.queue, d), exist_ok=True)
if not any(os.path.exists(os.path.join(args.queue, d, args.task)) for d in ("todo", "claimed", "done")):
    tmp = os.path.join(args.queue, f".{args.task}.tmp")
    with open(tmp, "w") as f:
        json.dump({"amount": 4200, "account": args.task}, f)
    os.replace(tmp, os.path.join(args.queue, "todo", args.task))
deadline = time.monotonic() + 30
while not os.path.exists(os.path.join(args.queue, "done", args.task)):
    if time.monotonic() > deadline:
        sys.exit("the task was never done")
    time.sleep(0.02)
print("done")
