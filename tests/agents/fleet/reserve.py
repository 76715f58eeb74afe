"""Reserve stock for an order once, under a lease: the zombie worker's agent (killdrill.faults.fleet).

A worker that stalls past its lease (``pause:after:effects.lease``) wakes up and writes anyway.
Without ``--fenced`` the write carries no fencing token and lands twice (a lease alone is no
guard).  With it, each new holder first presents its token to the stock ledger (older tokens
are refused from then on, and it learns whether a predecessor's write already landed), then
writes with it: the zombie's late write is refused and it adopts the new holder's result.
``--http`` makes the write over the HTTP fakes (``$KILLDRILL_FAKES_URL``) instead of in process.
"""

import argparse
import json
import os
import urllib.request

import killdrill
from killdrill.effects import FencedStore, fenced_effect
from killdrill.fakes import connect

parser = argparse.ArgumentParser()
parser.add_argument("--thread", required=True)
parser.add_argument("--db", required=True)  # the lease store, one per case (under {workdir})
parser.add_argument("--fenced", action="store_true", help="send the lease's fencing token with the write")
parser.add_argument("--http", action="store_true", help="write through the HTTP fakes")
args = parser.parse_args()

fakes = connect()
leases = FencedStore(args.db, lease_s=0.3)  # short, so a drill's resumer takes over quickly


def reserve(token: int) -> dict:
    fence = token if args.fenced else None  # without it, the stock ledger cannot tell a zombie
    if args.http:
        body = json.dumps({"name": "units_reserved", "by": 3, "fence": fence}).encode()
        url = os.environ["KILLDRILL_FAKES_URL"] + "/fakes/counter/increment"
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=30) as r:
            return json.loads(r.read())
    return fakes.counter.increment("units_reserved", by=3, fence=fence)


def present(token: int) -> int:
    return fakes.counter.fence("units_reserved", token)  # the highest token that already wrote


with killdrill.node("reserve"):
    key = f"{args.thread}:reserve"
    reservation = fenced_effect(leases, key, reserve, present=present if args.fenced else None, wait_s=10)
with killdrill.node("confirm"):
    fakes.kv.set(f"{args.thread}:status", "reserved")  # idempotent: converges however often
