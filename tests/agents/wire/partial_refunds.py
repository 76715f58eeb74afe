"""A returns agent written as apps are: the stripe SDK, refunding a PaymentIntent that was paid
before it ran (the drill declares it with ``--existing``), in parts: the returned item, then the
shipping, each a partial refund of the same charge.

Correct form: each refund's key is derived from the return and the line it refunds, so a
restarted process replays what already landed.  ``--bug key-per-run`` makes a fresh key per
process (the SDK's automatic key behaves so): a restart refunds again, and Stripe accepts it as
long as the charge has money left, a duplicate.

``--razorpay PAYMENT_ID``: the same return refunded through the ``razorpay`` SDK instead (a captured
payment declared with ``--existing``, the key in ``X-Refund-Idempotency``).
"""

from __future__ import annotations

import argparse
import os
import uuid

import stripe

p = argparse.ArgumentParser()
p.add_argument("--return-id", required=True)
p.add_argument("--payment-intent")
p.add_argument("--razorpay", metavar="PAYMENT_ID")
p.add_argument("--bug", default="")
args = p.parse_args()
run = uuid.uuid4().hex

if args.razorpay:
    import razorpay

    rzp = razorpay.Client(
        auth=("rzp_test_x", "secret"), base_url=os.environ["KILLDRILL_FAKES_URL"] + "/razorpay"
    )
    for line, amount in (("item", 2500), ("shipping", 500)):
        key = f"{args.return_id}-{run if args.bug == 'key-per-run' else ''}-{line}"
        refund = rzp.payment.refund(
            args.razorpay, {"amount": amount, "notes": {"line": line}}, headers={"X-Refund-Idempotency": key}
        )
        print(line, refund["id"], refund["amount"])
    print("refunded", rzp.payment.fetch(args.razorpay)["amount_refunded"])
    raise SystemExit(0)

client = stripe.StripeClient(
    "sk_test_x", base_addresses={"api": os.environ["KILLDRILL_FAKES_URL"]}, max_network_retries=2
)
for line, amount in (("item", 2500), ("shipping", 500)):
    key = f"{args.return_id}-{run if args.bug == 'key-per-run' else ''}-{line}"
    refund = client.v1.refunds.create(
        params={"payment_intent": args.payment_intent, "amount": amount, "metadata": {"line": line}},
        options={"idempotency_key": key},
    )
    print(line, refund.id, refund.amount)
charge = client.v1.payment_intents.retrieve(args.payment_intent, params={"expand": ["latest_charge"]})
print("refunded", charge.latest_charge.amount_refunded)  # type: ignore[union-attr]
