"""A two-step agent for the plugin's tests: charge, then write the invoice.

Its checkpoint is a JSON file in the workdir, written after each step, so a resumed attempt
skips finished steps.  ``--naive`` charges without an idempotency key, so a kill between the
charge and its checkpoint charges twice: the defect the failing drills must catch.
"""

from __future__ import annotations

import argparse
import json
import os

import killdrill
from killdrill.fakes import connect


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--naive", action="store_true")
    args = parser.parse_args()
    done: list[str] = []
    if os.path.exists(args.state):
        with open(args.state) as f:
            done = json.load(f)

    def checkpoint(step: str) -> None:
        done.append(step)
        tmp = args.state + ".tmp"
        with open(tmp, "w") as f:
            json.dump(done, f)
        os.replace(tmp, args.state)

    fakes = connect()
    if "charge" not in done:
        with killdrill.node("charge"):
            key = None if args.naive else f"{args.thread}:charge"
            fakes.payments.charge(idempotency_key=key, amount=100, account="acme")
        checkpoint("charge")
    if "invoice" not in done:
        with killdrill.node("invoice"):
            fakes.kv.set(f"invoice:{args.thread}", "paid")
        checkpoint("invoice")


if __name__ == "__main__":
    main()
