"""Two people answer in turn: a LangGraph graph with two ``interrupt()`` reviews, driven the
documented way and answered by the drill's scripted human (``--answer``).

``python tests/agents/basic/two_reviews.py --thread T --db PATH [--async] [--resend]``

``ask_amount -> charge -> ask_note -> file``: ``ask_amount`` asks for the amount, ``charge``
charges it (``payments.charge`` keyed by the thread), ``ask_note`` asks for a note, ``file`` opens a
ticket with it (``tickets.create``, keyed).  Which answer went to which question is in the effects'
payloads: a resumed run that handed the note question the amount's answer charges or files
something the clean run did not.

The driver: ``stream`` the input, or ``None`` when the thread has a checkpoint (resume), and print
the updates; a run left waiting on an interrupt says so and exits 0.  ``--resend`` is the
driver's mistake: it streams the input on every start, so a resume starts a new run (LangGraph
discards the pending tasks) instead of going on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from killdrill.fakes import connect


class State(TypedDict, total=False):
    order: str
    amount: int
    note: str


def build(thread: str) -> Any:
    fakes = connect()

    def ask_amount(s: State) -> State:
        return {"amount": int(interrupt({"question": "amount for the order?", "order": s["order"]}))}

    def charge(s: State) -> State:
        fakes.payments.charge(idempotency_key=f"{thread}:charge", order=s["order"], amount=s["amount"])
        return {}

    def ask_note(s: State) -> State:
        return {"note": str(interrupt({"question": "note for the ticket?"}))}

    def file(s: State) -> State:
        fakes.tickets.create(idempotency_key=f"{thread}:ticket", order=s["order"], note=s["note"])
        return {}

    g = StateGraph(State)
    for node in (ask_amount, charge, ask_note, file):
        g.add_node(node)
    g.add_edge(START, "ask_amount")
    g.add_edge("ask_amount", "charge")
    g.add_edge("charge", "ask_note")
    g.add_edge("ask_note", "file")
    g.add_edge("file", END)
    return g


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--thread", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--async", dest="use_async", action="store_true")
    p.add_argument("--resend", action="store_true")
    args = p.parse_args()
    config: Any = {"configurable": {"thread_id": args.thread}}
    if args.use_async:
        return asyncio.run(amain(args.thread, args.db, config))
    with SqliteSaver.from_conn_string(args.db) as saver:
        graph = build(args.thread).compile(checkpointer=saver)
        inputs = None if saver.get_tuple(config) and not args.resend else {"order": "A-17"}
        for update in graph.stream(inputs, config, stream_mode="updates"):
            print(update, flush=True)
        waiting = graph.get_state(config).interrupts
    if waiting:
        print(f"waiting: {waiting[0].value}")
    return 0


async def amain(thread: str, db: str, config: Any) -> int:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(db) as saver:
        graph = build(thread).compile(checkpointer=saver)
        inputs = None if await saver.aget_tuple(config) else {"order": "A-17"}
        print(await graph.ainvoke(inputs, config), flush=True)
        waiting = (await graph.aget_state(config)).interrupts
    if waiting:
        print(f"waiting: {waiting[0].value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
