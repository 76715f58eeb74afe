"""The order service's client (the driver): posts the order and retries until it is answered,
as a client does; ``--exit N`` exits N after the answer (a driver that fails)."""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

import killdrill

p = argparse.ArgumentParser()
p.add_argument("--url", required=True)
p.add_argument("--order", required=True)
p.add_argument("--exit", type=int, default=0)
args = p.parse_args()

deadline = time.monotonic() + 30
body = json.dumps({"order": args.order, "amount": 4200}).encode()
with killdrill.node("submit"):
    while True:
        req = urllib.request.Request(args.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                print(resp.read().decode())
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            if time.monotonic() > deadline:
                sys.exit(f"gave up: {exc}")
            time.sleep(0.05)
sys.exit(args.exit)
