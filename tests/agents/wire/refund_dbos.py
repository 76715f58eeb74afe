"""A refund as a DBOS script, written as DBOS's docs write one, its effects sent over the wire:
the refund with the stripe SDK, the receipt with ``smtplib`` or a mail API over HTTP.

Nothing here knows killdrill: the providers' addresses come from the environment, as any app's
do.  The workflow's id is the order (a re-run attaches to the workflow already started, which
DBOS recovers on launch) and the refund's key is derived from it; the receipt is sent in a step.
``--bug`` plants one pitfall:

- ``new_id``: the workflow is started without an id (DBOS gives it a new one), so a re-run after
  a kill is a second refund workflow beside the recovered first (``work_resubmitted``);
- ``email_in_body``: the receipt is sent from the workflow's body, outside any step, so DBOS's
  recovery sends it again (``effect_outside_step``).
"""

from __future__ import annotations

import argparse
import os
import smtplib
from email.message import EmailMessage

import requests
import stripe
from dbos import DBOS, DBOSConfig, SetWorkflowID

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--workdir", required=True)
p.add_argument("--mail", choices=("smtp", "http"), default="smtp")
p.add_argument("--bug", choices=("new_id", "email_in_body"))
args = p.parse_args()

BASE = os.environ["KILLDRILL_FAKES_URL"]
stripe_client = stripe.StripeClient("sk_test_x", base_addresses={"api": BASE}, max_network_retries=0)


@DBOS.step()
def refund(order: str) -> str:
    intent = stripe_client.v1.payment_intents.create(
        params={"amount": 2500, "currency": "gbp", "metadata": {"order": order}},
        options={"idempotency_key": f"refund-{DBOS.workflow_id}"},
    )
    return intent.id


def send_receipt(order: str, refund_id: str) -> None:
    if args.mail == "http":
        mail = {"to": "customer@example.com", "subject": f"Refund for {order}", "refund": refund_id}
        requests.post(f"{BASE}/hooks/mail/send", json=mail, timeout=10).raise_for_status()
        return
    msg = EmailMessage()
    msg["From"] = "refunds@shop.example"
    msg["To"] = "customer@example.com"
    msg["Subject"] = f"Refund for {order}"
    msg.set_content(f"Refunded 25.00 GBP ({refund_id}).")
    host, port = os.environ["KILLDRILL_SMTP"].rsplit(":", 1)
    with smtplib.SMTP(host, int(port), timeout=10) as smtp:
        smtp.send_message(msg)


@DBOS.step()
def receipt(order: str, refund_id: str) -> None:
    send_receipt(order, refund_id)


@DBOS.step()
def close_case(order: str) -> None:
    pass


@DBOS.workflow()
def refund_workflow(order: str) -> str:
    refund_id = refund(order)
    if args.bug == "email_in_body":
        send_receipt(order, refund_id)
    else:
        receipt(order, refund_id)
    close_case(order)
    return refund_id


config: DBOSConfig = {
    "name": "refunds",
    "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
    "log_level": "WARNING",
}
DBOS(config=config)
DBOS.launch()
try:
    if args.bug == "new_id":
        handle = DBOS.start_workflow(refund_workflow, args.order)
    else:
        with SetWorkflowID(args.order):
            handle = DBOS.start_workflow(refund_workflow, args.order)
    print("refunded", handle.get_result())
finally:
    DBOS.destroy()
