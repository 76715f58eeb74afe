"""A billing agent written the way the OpenAI Agents SDK docs write agents, drilled unedited.

``python -m killdrill.examples.billing_openai_agents --thread T --db PATH [--bug NAME] [--request TEXT]``

``Agent(tools=[...])`` with ``@function_tool`` tools, a ``SQLiteSession`` per thread, ``Runner.run``
on the SDK's default model API (the Responses API).  The tools use production clients: the
``stripe`` SDK charges the card, ``smtplib`` sends the receipt.  Nothing here knows about
killdrill: ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` are read by the SDK, ``STRIPE_API_BASE``,
``SMTP_HOST`` (``host:port``) and ``MAIL_LOOKUP_URL`` (the mail provider's "was this Message-ID
delivered?") by the tools.

The SDK saves a turn's items (the model's function calls and the tools' outputs) in the session
after the turn's tools finish.  A kill while a tool runs, or after it returned but before that
save, loses the model's call: the resume asks the model again, and a real model answers with a
new call id.  The correct form keys the charge by the thread and the logical action (order and
amount) and sends the receipt through an outbox reconciled by ``Message-ID``.  Resume: a
session that already holds the request is continued with no new input (passing the request
again would append it a second time), until its last item is the assistant's answer.

Planted bugs (``--bug``), each seen in the field:

``call-id-key``
    the charge keyed by the tool-call id (``ToolContext.tool_call_id``): a resume that asks the
    model again gets a new call id, as from any model, and charges twice (``duplicate_effect`` +
    ``key_changed`` on ``payments.charge``, cause ``model_id_key``).
``receipt-ungated``
    the receipt sent straight away: a kill between the send and the session's save sends it again
    on resume (``duplicate_effect`` on ``mailbox.send``), with or without variance.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import smtplib
import sqlite3
import sys
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Any

import httpx
import stripe
from agents import Agent, Runner, RunResult, SQLiteSession, function_tool
from agents.tool_context import ToolContext

DEFAULT_REQUEST = "Please bill order B-42 for 2500 cents and email the receipt to ana@example.com."
BUGS = ("call-id-key", "receipt-ungated")

INSTRUCTIONS = (
    "You are a billing assistant. Charge the order with charge_card, then email the receipt with "
    "send_receipt, then say in one sentence what you did."
)


class ReceiptOutbox:
    """The app's own record of receipts: claimed before sending, marked sent after."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS outbox (message_id TEXT PRIMARY KEY, status TEXT)")

    def status(self, message_id: str) -> str | None:
        row = self.db.execute("SELECT status FROM outbox WHERE message_id = ?", (message_id,)).fetchone()
        return str(row[0]) if row else None

    def mark(self, message_id: str, status: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO outbox VALUES (?, ?)", (message_id, status))


def delivered(message_id: str) -> bool:
    """Ask the mail provider whether a message with this Message-ID went out."""
    resp = httpx.post(os.environ["MAIL_LOOKUP_URL"], json={"ref": message_id}, timeout=10)
    resp.raise_for_status()
    return resp.json().get("result") is not None


def make_tools(thread: str, outbox: ReceiptOutbox, bug: str | None) -> list[Any]:
    client = stripe.StripeClient(
        os.environ.get("STRIPE_API_KEY", "sk_test_example"),
        base_addresses={"api": os.environ.get("STRIPE_API_BASE", "https://api.stripe.com")},
    )

    @function_tool
    def charge_card(ctx: ToolContext[Any], order_id: str, amount_cents: int) -> str:
        """Charge the customer's card for an order.

        Args:
            order_id: The order, e.g. B-42.
            amount_cents: The amount in cents.
        """
        stable = f"{thread}:charge:{order_id}:{amount_cents}"  # the thread and the logical action
        key = ctx.tool_call_id if bug == "call-id-key" else stable
        intent = client.v1.payment_intents.create(
            params={"amount": amount_cents, "currency": "usd", "metadata": {"order_id": order_id}},
            options={"idempotency_key": key},
        )
        return json.dumps({"payment_intent": intent.id, "status": intent.status})

    @function_tool
    def send_receipt(order_id: str, email: str, amount_cents: int) -> str:
        """Email the customer a receipt for a paid order.

        Args:
            order_id: The order, e.g. B-42.
            email: The customer's address.
            amount_cents: The amount paid, in cents.
        """
        msg = EmailMessage()
        msg["From"] = "billing@example.com"
        msg["To"] = email
        msg["Subject"] = f"Receipt for order {order_id}"
        msg.set_content(f"Order {order_id}: {amount_cents / 100:.2f} USD paid. Thank you.")
        if bug == "receipt-ungated":
            with smtplib.SMTP(os.environ["SMTP_HOST"], timeout=10) as smtp:
                smtp.send_message(msg)
            return "receipt sent"
        message_id = f"<receipt-{order_id}-{thread}@billing.example.com>"
        msg["Message-ID"] = message_id
        state = outbox.status(message_id)
        if state == "sent" or (state == "sending" and delivered(message_id)):
            outbox.mark(message_id, "sent")
            return "receipt already sent"
        outbox.mark(message_id, "sending")  # a kill from here on leaves a claim to reconcile
        with smtplib.SMTP(os.environ["SMTP_HOST"], timeout=10) as smtp:
            smtp.send_message(msg)
        outbox.mark(message_id, "sent")
        return "receipt sent"

    return [charge_card, send_receipt]


def finished(items: Sequence[Any]) -> str | None:
    """The assistant's answer when the session's last item is one (the run is over), else None."""
    last = items[-1] if items else None
    if (
        isinstance(last, dict)
        and last.get("role") == "assistant"
        and last.get("type", "message") == "message"
    ):
        parts = last.get("content") or []
        return "".join(p.get("text", "") for p in parts if isinstance(p, dict)) if parts else ""
    return None


async def main(thread: str, db: str, request: str, bug: str | None) -> str:
    session = SQLiteSession(thread, db)
    agent = Agent(
        name="Billing",
        instructions=INSTRUCTIONS,
        tools=make_tools(thread, ReceiptOutbox(f"{db}.outbox"), bug),
    )
    items = await session.get_items()
    done = finished(items)
    if done is not None:
        return done
    # A session that holds the request is resumed with no new input: the SDK prepends its items.
    result: RunResult = await Runner.run(agent, [] if items else request, session=session)
    return str(result.final_output)


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.billing_openai_agents")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--db", required=True, help="the SQLiteSession file (the outbox goes next to it)")
    parser.add_argument("--bug", choices=BUGS, help="a planted bug (see the module's docstring)")
    parser.add_argument("--request", default=DEFAULT_REQUEST)
    args = parser.parse_args(argv)
    print(asyncio.run(main(args.thread, args.db, args.request, args.bug)))
    return 0


if __name__ == "__main__":
    sys.exit(run())
