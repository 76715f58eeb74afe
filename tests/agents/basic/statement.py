"""Writes a long account statement with ``kv.set``, counting its runs in the record itself.

The pitfall: ``runs`` is a counter disguised inside an idempotent write, so a resumed attempt
writes a record that differs from the clean run's in that one field, deep in a long value.
"""

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--ckpt", required=True)
args = p.parse_args()

runs = 0
if os.path.exists(args.ckpt):
    with open(args.ckpt) as f:
        runs = json.load(f)["runs"]
with open(args.ckpt, "w") as f:
    json.dump({"runs": runs + 1}, f)

fakes = connect()
with killdrill.node("write_statement"):
    fakes.kv.set(
        "statement:acme-industrial-holdings",
        {
            "account": "acme-industrial-holdings-international-division",
            "period": "2024-06-01..2024-06-30",
            "lines": [{"sku": f"compute-{i}", "units": 100 + i} for i in range(6)],
            "runs": runs + 1,
        },
    )
