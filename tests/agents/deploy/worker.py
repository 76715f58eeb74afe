"""A queue worker (run as replicas): claims a task file from ``--queue``, ships it (a charge),
marks it done.  A claim older than ``--lease`` seconds whose worker died is taken over by
another worker, as a broker redelivers a dead consumer's task; ``--bug nokey`` ships without a key.
"""

import argparse
import json
import os
import time

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--queue", required=True)
p.add_argument("--name", required=True)
p.add_argument("--lease", type=float, default=0.5)
p.add_argument("--bug", default="")
args = p.parse_args()
fakes = connect()
for d in ("todo", "claimed", "done"):
    os.makedirs(os.path.join(args.queue, d), exist_ok=True)


def dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def claim() -> str | None:
    """A task of ours: a new one, or one whose claim expired (its worker died)."""
    for task in sorted(os.listdir(os.path.join(args.queue, "todo"))):
        try:
            os.rename(os.path.join(args.queue, "todo", task), os.path.join(args.queue, "claimed", task))
            with open(os.path.join(args.queue, "claimed", task + ".owner"), "w") as f:
                f.write(str(os.getpid()))
            return task
        except FileNotFoundError:
            continue
    for task in sorted(os.listdir(os.path.join(args.queue, "claimed"))):
        path = os.path.join(args.queue, "claimed", task)
        if task.endswith(".owner"):
            continue
        try:
            with open(path + ".owner") as f:
                owner = int(f.read() or 0)
            if time.time() - os.stat(path).st_mtime > args.lease and dead(owner):
                with open(path + ".owner", "w") as f:
                    f.write(str(os.getpid()))
                return task
        except (FileNotFoundError, ValueError):
            continue
    return None


while True:
    task = claim()
    if task is None:
        time.sleep(0.02)
        continue
    with open(os.path.join(args.queue, "claimed", task)) as f:
        body = json.load(f)
    with killdrill.node("ship"):
        key = None if args.bug == "nokey" else f"ship:{task}"
        fakes.payments.charge(idempotency_key=key, amount=body["amount"], account=body["account"])
    os.replace(os.path.join(args.queue, "claimed", task), os.path.join(args.queue, "done", task))
