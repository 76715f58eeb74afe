"""A newcomer's LangGraph agent: charge, webhook and email, each a node.

``--resume next`` (the mistake) resumes only ``if snap.next:``: a thread killed after a node's
writes were saved but before the next checkpoint has ``snap.tasks`` and an empty ``next``, so the
resumed attempt exits 0 with the work pending.  ``--resume full`` (correct) resumes while
``snap.next or snap.tasks``.  ``--key uuid`` / ``--key none`` plant a charge key bug whose
charge id then appears in the webhook and email bodies (consequences, not separate bugs).
"""

import argparse
import uuid
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from killdrill.fakes import connect

parser = argparse.ArgumentParser()
parser.add_argument("--thread", required=True)
parser.add_argument("--db", required=True)
parser.add_argument("--resume", choices=("next", "full"), default="full")
parser.add_argument("--key", choices=("stable", "uuid", "none"), default="stable")
args = parser.parse_args()

fakes = connect()


class State(TypedDict, total=False):
    order: str
    charge_id: str
    hooked: bool
    mailed: bool


def charge(state: State) -> State:
    key = {"stable": f"{args.thread}:charge", "uuid": str(uuid.uuid4()), "none": None}[args.key]
    ch = fakes.payments.charge(amount=4200, currency="usd", customer=state["order"], idempotency_key=key)
    return {"charge_id": ch["id"]}


def notify(state: State) -> State:
    fakes.webhooks.post(
        url="https://example.com/hooks",
        body={"charge": state["charge_id"]},
        idempotency_key=f"{args.thread}:hook",
    )
    return {"hooked": True}


def email(state: State) -> State:
    sent = fakes.mailbox.lookup(f"{args.thread}:receipt")
    if sent is None:
        fakes.mailbox.send(
            to="ana@example.com",
            subject="receipt",
            body=f"charged {state['charge_id']}",
            ref=f"{args.thread}:receipt",
        )
    return {"mailed": True}


g = StateGraph(State)
g.add_node("charge", charge)
g.add_node("notify", notify)
g.add_node("email", email)
g.add_edge(START, "charge")
g.add_edge("charge", "notify")
g.add_edge("notify", "email")
g.add_edge("email", END)

config = {"configurable": {"thread_id": args.thread}}
with SqliteSaver.from_conn_string(args.db) as saver:
    app = g.compile(checkpointer=saver)
    snap = app.get_state(config)
    if not snap.values and not snap.next:
        app.invoke({"order": "A-17"}, config, durability="sync")
    elif snap.next or (args.resume == "full" and snap.tasks):
        app.invoke(None, config, durability="sync")
