"""Recomputes the amount inside the charge step on every attempt (a late fee after a restart),
and sends no key: a resume after the charge landed charges a different amount, an effect the
clean run never had."""

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--ckpt", required=True)
args = p.parse_args()
done = False
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        done = json.load(f).get("charged")
fakes = connect()
if not done:
    with killdrill.node("charge"):
        amount = 4200 + 100 * (int(os.environ.get("KILLDRILL_ATTEMPT", "1")) - 1)  # DEFECT
        fakes.payments.charge(amount=amount, account="acme")
    with open(args.ckpt, "w") as f:
        json.dump({"charged": True}, f)
