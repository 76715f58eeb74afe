"""An order agent written as apps are: stripe SDK, httpx, requests, gocardless_pro, smtplib.

Nothing here knows killdrill: it reads its providers' base URLs from the environment (as any app
reads ``STRIPE_API_BASE`` or ``SMTP_HOST``) and keeps a JSON checkpoint, written after each step.

Correct form: every create carries a key derived from the order; the receipt email has a stable
``Message-ID`` and is gated: marked "sending" in the checkpoint first, and after a crash in
that window the mail provider's message search (``/fakes/mailbox/lookup``) says whether it left.
``--bug`` plants one pitfall: ``mail-ungated`` (send again on resume), ``hook-random-key`` (a
fresh key per process for the ticket), ``stripe-auto-key`` (the SDK's automatic key),
``gocardless-auto-key`` (the SDK's automatic key), ``payout-random-key`` (fresh Razorpay key).
"""

from __future__ import annotations

import argparse
import json
import os
import smtplib
import uuid
from email.message import EmailMessage
from typing import Any

import gocardless_pro
import httpx
import requests
import stripe

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--state", required=True)
p.add_argument("--bug", default="")
args = p.parse_args()

BASE = os.environ["KILLDRILL_FAKES_URL"]
SMTP_HOST, SMTP_PORT = os.environ["KILLDRILL_SMTP"].rsplit(":", 1)
state: dict[str, Any] = {}
if os.path.exists(args.state):
    with open(args.state) as f:
        state = json.load(f)


def save() -> None:
    with open(args.state + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(args.state + ".tmp", args.state)


def key(step: str) -> str:
    return f"{args.order}-{step}"


if "charge" not in state:
    client = stripe.StripeClient("sk_test_x", base_addresses={"api": BASE}, max_network_retries=2)
    options: dict[str, Any] = {} if args.bug == "stripe-auto-key" else {"idempotency_key": key("charge")}
    intent = client.v1.payment_intents.create(
        params={"amount": 4200, "currency": "gbp", "metadata": {"order": args.order}},
        options=options,  # type: ignore[arg-type]
    )
    state["charge"] = intent.id
    save()

if "mandate_payment" not in state:
    gc = gocardless_pro.Client(access_token=os.environ["KILLDRILL_FAKES_SECRET"], base_url=BASE)
    headers = {} if args.bug == "gocardless-auto-key" else {"Idempotency-Key": key("gc")}
    payment = gc.payments.create(
        params={"amount": 4200, "currency": "GBP", "links": {"mandate": "MD0001"}}, headers=headers
    )
    state["mandate_payment"] = payment.id
    save()

if "payout" not in state:
    payout_key = uuid.uuid4().hex[:30] if args.bug == "payout-random-key" else key("payout")
    body = {
        "account_number": "7878780080316316",
        "fund_account_id": "fa_0001",
        "amount": 1000,
        "currency": "INR",
        "mode": "IMPS",
        "purpose": "refund",
        "reference_id": args.order,
    }
    r = httpx.post(f"{BASE}/razorpay/v1/payouts", json=body, headers={"X-Payout-Idempotency": payout_key})
    r.raise_for_status()
    state["payout"] = r.json()["id"]
    save()

if "ticket" not in state:
    ticket_key = str(uuid.uuid4()) if args.bug == "hook-random-key" else key("ticket")
    with httpx.Client(base_url=f"{BASE}/hooks") as http:
        r = http.post(
            "/tickets", json={"order": args.order, "kind": "fulfil"}, headers={"Idempotency-Key": ticket_key}
        )
    r.raise_for_status()
    state["ticket"] = r.json()["id"]
    save()

if "notified" not in state:
    r2 = requests.post(
        f"{BASE}/hooks/notify",
        json={"order": args.order, "event": "paid"},
        headers={"Idempotency-Key": key("notify")},
    )
    r2.raise_for_status()
    state["notified"] = True
    save()

if state.get("receipt") != "sent":
    message_id = f"<{args.order}.receipt@shop.example>"
    already = False
    if state.get("receipt") == "sending" and args.bug != "mail-ungated":
        found = requests.post(f"{BASE}/fakes/mailbox/lookup", json={"ref": message_id}).json()["result"]
        already = found is not None
    if not already:
        state["receipt"] = "sending"
        save()
        msg = EmailMessage()
        msg["From"] = "shop@shop.example"
        msg["To"] = "customer@example.com"
        msg["Subject"] = f"Receipt for order {args.order}"
        if args.bug != "mail-ungated":
            msg["Message-ID"] = message_id
        msg.set_content(f"We charged 42.00 GBP for order {args.order}. Ticket {state['ticket']}.")
        with smtplib.SMTP(SMTP_HOST, int(SMTP_PORT), timeout=30) as smtp:
            smtp.send_message(msg)
    state["receipt"] = "sent"
    save()
print(json.dumps(state, sort_keys=True))
