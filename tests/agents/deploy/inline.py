"""The order service's work as one command (the benchmark's yardstick for the topology): the
same ``submit`` and ``charge`` boundaries, the same keyed charge, the same state file, no HTTP."""

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--state", required=True)
args = p.parse_args()
os.makedirs(args.state, exist_ok=True)
path = os.path.join(args.state, f"{args.order}.json")
with killdrill.node("submit"):
    if not os.path.exists(path):
        with killdrill.node("charge"):
            charge = connect().payments.charge(
                idempotency_key=f"order:{args.order}", amount=4200, account=args.order
            )
        with open(path + ".tmp", "w") as f:
            json.dump({"order": args.order, "charge": charge["id"]}, f)
        os.replace(path + ".tmp", path)
