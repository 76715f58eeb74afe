"""An order agent written the way people write LangGraph agents, drilled without editing it.

``python -m killdrill.examples.order_agent --thread T --db PATH [--naive] [--request TEXT]``

A ``ChatOpenAI`` model with tools bound, a prebuilt ``ToolNode`` and ``tools_condition``, a
``SqliteSaver`` checkpointer.  The tools use the clients production code uses: the ``stripe``
SDK charges the card, ``httpx`` posts the fulfilment webhook, ``smtplib`` sends the receipt.
Nothing here knows about killdrill: every endpoint comes from the environment, as in any
deployment (``OPENAI_BASE_URL``/``OPENAI_API_KEY`` are read by the OpenAI SDK itself;
``STRIPE_API_KEY``, ``STRIPE_API_BASE``, ``ORDER_WEBHOOK_URL``, ``SMTP_HOST`` as ``host:port``,
and ``MAIL_LOOKUP_URL``, the mail provider's "was this Message-ID delivered?" endpoint).

The default form is correct under kills: the charge and the webhook carry idempotency keys
derived from the thread and the business data (order, amount, event), never from anything
the model produced, and the receipt goes through an outbox: a row claimed before sending, and
a claim left in flight by a kill is reconciled with the mail provider before sending again.
``--naive`` is the form that looks right: the tool-call id as the idempotency key (stable only
as long as the model is not asked again) and the receipt sent straight away.

Resume is ``invoke(None, config)`` when the thread has a checkpoint (passing the request again
would start a new run and repeat every effect), until the snapshot has neither ``next`` nor
``tasks``: a step whose writes were saved before the kill is a task, not ``next``.
"""

from __future__ import annotations

import argparse
import json
import os
import smtplib
import sqlite3
import sys
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Annotated, Any

import httpx
import stripe
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

DEFAULT_REQUEST = "Please settle order A-17 for 4200 cents and email the receipt to ana@example.com."


def _thread(config: Any) -> str:
    return str(config["configurable"]["thread_id"])


class Outbox:
    """The app's own record of receipts: claimed before sending, marked sent after."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS outbox (message_id TEXT PRIMARY KEY, status TEXT)")

    def status(self, message_id: str) -> str | None:
        row = self.db.execute("SELECT status FROM outbox WHERE message_id = ?", (message_id,)).fetchone()
        return row[0] if row else None

    def mark(self, message_id: str, status: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO outbox VALUES (?, ?)", (message_id, status))


def delivered(message_id: str) -> bool:
    """Ask the mail provider whether a message with this Message-ID went out."""
    resp = httpx.post(os.environ["MAIL_LOOKUP_URL"], json={"ref": message_id}, timeout=10)
    resp.raise_for_status()
    return resp.json().get("result") is not None


def make_tools(*, naive: bool, outbox: Outbox | None) -> list[Any]:
    client = stripe.StripeClient(
        os.environ.get("STRIPE_API_KEY", "sk_test_example"),
        base_addresses={"api": os.environ.get("STRIPE_API_BASE", "https://api.stripe.com")},
    )

    @tool
    def charge_card(
        order_id: str,
        amount_cents: int,
        config: RunnableConfig,
        tool_call_id: Annotated[str, InjectedToolCallId],
    ) -> str:
        """Charge the customer's card for an order (amount in cents)."""
        key = tool_call_id if naive else f"{_thread(config)}:charge:{order_id}:{amount_cents}"
        intent = client.v1.payment_intents.create(
            params={"amount": amount_cents, "currency": "usd", "metadata": {"order_id": order_id}},
            options={"idempotency_key": key},
        )
        return json.dumps({"payment_intent": intent.id, "status": intent.status})

    @tool
    def notify_fulfilment(
        order_id: str,
        payment_intent: str,
        config: RunnableConfig,
        tool_call_id: Annotated[str, InjectedToolCallId],
    ) -> str:
        """Tell the warehouse an order is paid (a webhook)."""
        key = tool_call_id if naive else f"{_thread(config)}:order.paid:{order_id}"
        body = {"event": "order.paid", "order_id": order_id, "payment_intent": payment_intent}
        resp = httpx.post(
            os.environ["ORDER_WEBHOOK_URL"], json=body, headers={"Idempotency-Key": key}, timeout=10
        )
        resp.raise_for_status()
        return f"fulfilment notified ({resp.status_code})"

    @tool
    def send_receipt(order_id: str, email: str, amount_cents: int, config: RunnableConfig) -> str:
        """Email the customer a receipt for a paid order."""
        msg = EmailMessage()
        msg["From"] = "shop@example.com"
        msg["To"] = email
        msg["Subject"] = f"Receipt for order {order_id}"
        msg.set_content(f"Order {order_id}: {amount_cents / 100:.2f} USD paid. Thank you.")
        if naive:
            with smtplib.SMTP(os.environ["SMTP_HOST"], timeout=10) as smtp:
                smtp.send_message(msg)
            return "receipt sent"
        assert outbox is not None
        message_id = f"<receipt-{order_id}-{_thread(config)}@shop.example.com>"
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

    return [charge_card, notify_fulfilment, send_receipt]


def build_graph(tools: list[Any]) -> Any:
    model = ChatOpenAI(model="gpt-4o-mini", temperature=0).bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.order_agent")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--db", required=True, help="SQLite checkpoint file (the outbox goes next to it)")
    parser.add_argument("--naive", action="store_true", help="tool-call id as the key, receipt ungated")
    parser.add_argument("--request", default=DEFAULT_REQUEST)
    args = parser.parse_args(argv)

    outbox = None if args.naive else Outbox(f"{args.db}.outbox")
    config: Any = {"configurable": {"thread_id": args.thread}}
    with SqliteSaver.from_conn_string(args.db) as saver:
        app = build_graph(make_tools(naive=args.naive, outbox=outbox)).compile(checkpointer=saver)
        inputs: Any = None if saver.get_tuple(config) else {"messages": [HumanMessage(args.request)]}
        snapshot = app.get_state(config)
        # Finished only when nothing is left to run: a step whose writes were saved before the
        # kill shows up in `tasks` (with its result), not in `next`.
        while inputs is not None or snapshot.next or snapshot.tasks:
            app.invoke(inputs, config)
            inputs, snapshot = None, app.get_state(config)
        final = snapshot.values["messages"][-1]
    print(final.content)
    return 0


if __name__ == "__main__":
    sys.exit(run())
