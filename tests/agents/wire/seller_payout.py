"""A marketplace's payout agent written as apps are: the stripe SDK, paying a seller their share
of an order (a transfer to the seller's connected account, declared to the drill with
``--existing``), then paying the platform's fee out to its bank.

Correct form: each call's key is derived from the order and what it pays, so a restarted process
replays what already landed.  ``--bug key-per-run`` makes a fresh key per process (the SDK's
automatic key behaves so): a restart pays the seller again, and Stripe accepts it.
"""

from __future__ import annotations

import argparse
import os
import uuid

import stripe

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--seller", required=True)
p.add_argument("--bug", default="")
args = p.parse_args()
run = uuid.uuid4().hex if args.bug == "key-per-run" else ""

client = stripe.StripeClient(
    "sk_test_x", base_addresses={"api": os.environ["KILLDRILL_FAKES_URL"]}, max_network_retries=2
)
share = client.v1.transfers.create(
    params={
        "amount": 8000,
        "currency": "usd",
        "destination": args.seller,
        "transfer_group": args.order,
        "metadata": {"order": args.order},
    },
    options={"idempotency_key": f"{args.order}-{run}-seller"},
)
print("seller paid", share.id, share.amount)
fee = client.v1.payouts.create(
    params={"amount": 2000, "currency": "usd", "metadata": {"order": args.order}},
    options={"idempotency_key": f"{args.order}-{run}-fee"},
)
print("fee paid out", fee.id, fee.status)
