"""The refund service's client (the driver): makes the charge to refund (keyed, through the stripe
SDK), then ``POST /refunds`` of part of it and retries the POST on a connection error, as
clients do, until it is answered."""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

import stripe

p = argparse.ArgumentParser()
p.add_argument("--url", required=True)
p.add_argument("--request", required=True)
args = p.parse_args()

client = stripe.StripeClient("sk_test_x", base_addresses={"api": os.environ["KILLDRILL_FAKES_URL"]})
intent = client.v1.payment_intents.create(
    params={"amount": 4200, "currency": "usd"}, options={"idempotency_key": f"{args.request}-charge"}
)
body = json.dumps({"request_id": args.request, "payment_intent": intent.id, "amount": 1500}).encode()
deadline = time.monotonic() + 60
while True:
    req = urllib.request.Request(args.url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            print(resp.read().decode())
            break
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        if isinstance(exc, urllib.error.HTTPError) or time.monotonic() > deadline:
            sys.exit(f"gave up: {exc}")
        time.sleep(0.2)
