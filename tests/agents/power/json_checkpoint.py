"""A payout agent that keeps its progress in a JSON checkpoint, as users write one: each payout's
idempotency key is made once and checkpointed before the charge, so a resumed attempt sends the
same key again; a checkpoint it cannot read starts the run over.

Correct: the checkpoint is written to a temporary file, flushed and fsynced, renamed over the old
one with ``os.replace``, and the directory is fsynced.  ``--bug no-fsync``: the same without the
two fsyncs, which survives every SIGKILL (the kernel holds the write) and not a power loss.
"""

import argparse
import json
import os
import uuid

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--ckpt", required=True)
p.add_argument("--bug", choices=("no-fsync",), default=None)
args = p.parse_args()


def load() -> dict:
    try:
        with open(args.ckpt) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):  # none yet, or torn: start over
        return {"done": [], "keys": {}}


def save(state: dict) -> None:
    tmp = args.ckpt + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        if args.bug is None:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, args.ckpt)
    if args.bug is None:
        fd = os.open(os.path.dirname(os.path.abspath(args.ckpt)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


state = load()
payments = connect().payments
for payee, amount in (("alice", 1200), ("bob", 3400)):
    if payee in state["done"]:
        continue
    with killdrill.node(f"pay_{payee}"):
        if payee not in state["keys"]:
            state["keys"][payee] = f"payout-{uuid.uuid4()}"
            save(state)
        payments.charge(idempotency_key=state["keys"][payee], amount=amount, customer=payee)
    state["done"].append(payee)
    save(state)
