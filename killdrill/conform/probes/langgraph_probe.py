"""The LangGraph probe: ``reserve -> charge -> notify`` as a ``StateGraph`` with ``SqliteSaver``.

    python -m killdrill.conform.probes.langgraph_probe --thread T --workdir DIR [--interrupt]

Written as LangGraph's durable-execution docs say: a checkpointer, ``durability="sync"``, resume
with ``invoke(None, config)`` while the snapshot has work left, keys from the thread id and node.
``--interrupt``: ``notify`` first asks a human (``interrupt()``); a process that finds the thread
parked at that interrupt delivers ``Command(resume=--approval)`` as an approval webhook would, the
point ``before:deliver`` marking the start of a delivery, and the approved notice is an email
(``mailbox.send``: what consuming the value causes, which no key can dedupe).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TypedDict

import killdrill
from killdrill.conform.probes._common import parse
from killdrill.fakes import connect


class State(TypedDict, total=False):
    customer: str
    hold: str
    charge_id: str
    notice: str


def main(argv: Sequence[str] | None = None) -> int:
    args = parse("langgraph_probe", argv)
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    fakes = connect()
    thread = args.thread

    def reserve(state: State) -> State:
        fakes.kv.set(f"hold/{thread}", {"customer": state["customer"], "amount": 4200})
        return {"hold": f"hold/{thread}"}

    def charge(state: State) -> State:
        c = fakes.payments.charge(
            idempotency_key=f"{thread}:charge", amount=4200, currency="usd", customer=state["customer"]
        )
        return {"charge_id": c["id"]}

    def notify(state: State) -> State:
        if args.interrupt:
            decision = interrupt({"question": "send the notice?", "charge": state["charge_id"]})
            sent = fakes.mailbox.send(
                to="billing@acme.example", subject="Charged", body=f"{decision}: {state['charge_id']}"
            )
            return {"notice": sent["id"]}
        posted = fakes.webhooks.post(
            idempotency_key=f"{thread}:notify", event="charged", charge=state["charge_id"]
        )
        return {"notice": posted["id"]}

    graph = StateGraph(State)
    for name, fn in (("reserve", reserve), ("charge", charge), ("notify", notify)):
        graph.add_node(name, fn)
    graph.add_edge(START, "reserve")
    graph.add_edge("reserve", "charge")
    graph.add_edge("charge", "notify")
    graph.add_edge("notify", END)
    config: Any = {"configurable": {"thread_id": thread}}
    with SqliteSaver.from_conn_string(f"{args.workdir}/ckpt.sqlite") as saver:
        app = graph.compile(checkpointer=saver)
        if saver.get_tuple(config) is None:
            app.invoke({"customer": "acme"}, config, durability="sync")
        snap = app.get_state(config)
        if snap.interrupts:
            killdrill.boundary("before:deliver")
            app.invoke(Command(resume=args.approval), config, durability="sync")
        elif snap.next or snap.tasks:
            app.invoke(None, config, durability="sync")
    return 0


if __name__ == "__main__":
    sys.exit(main())
