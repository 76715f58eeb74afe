"""Two steps; the second sends an irreversible email behind a claim in a ResultStore.

``--racy`` uses the planted read-then-insert claim (RacyResultStore): two resumers that
read "no claim" at the same time both send.  The atomic claim lets exactly one send; the
other waits for the owner and replays.

``--stagger A,B``: the two resumers (attempt 2) start slowly, as on a loaded machine or with a
framework to import: the first to start waits A seconds before its first boundary, the other B.
"""

import argparse
import json
import os
import time

import killdrill
from killdrill.effects import RacyResultStore, ResultStore, gate
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--thread", required=True)
p.add_argument("--ckpt", required=True)
p.add_argument("--store", required=True)
p.add_argument("--racy", action="store_true")
p.add_argument("--stagger", help="A,B: seconds each resumer waits before its first boundary")
args = p.parse_args()

if args.stagger and os.environ.get("KILLDRILL_ATTEMPT") == "2":
    first, other = (float(x) for x in args.stagger.split(","))
    try:
        os.close(os.open(args.ckpt + ".first", os.O_CREAT | os.O_EXCL))
        time.sleep(first)
    except FileExistsError:
        time.sleep(other)

state = {"step": 0}
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        state = json.load(f)
fakes = connect()
store = (RacyResultStore if args.racy else ResultStore)(args.store)
if state["step"] < 1:
    with killdrill.node("prepare"):
        state["to"] = "ops@example.com"
    state["step"] = 1
    with open(args.ckpt, "w") as f:
        json.dump(state, f)
with killdrill.node("notify"):
    ref = f"{args.thread}:notify"
    gate(
        store,
        ref,
        lambda: fakes.mailbox.send(to=state["to"], subject="settled", body="done", ref=ref),
        reconcile=fakes.mailbox.lookup,
        wait_s=20,
    )
