"""The zombie worker as a LangGraph graph: the reserve node writes under a lease.

Drilled with ``--langgraph``: ``pause:after:effects.lease`` stops the worker inside the node
while a second worker resumes the thread from the checkpoint.  Without ``--fenced`` both
reserve (a lease alone is no guard); with it the stock ledger refuses the stale token.
"""

import argparse
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from killdrill.effects import FencedStore, fenced_effect
from killdrill.fakes import connect

parser = argparse.ArgumentParser()
parser.add_argument("--thread", required=True)
parser.add_argument("--db", required=True)  # the checkpoint; the leases live next to it
parser.add_argument("--fenced", action="store_true")
args = parser.parse_args()

fakes = connect()
leases = FencedStore(args.db + ".leases", lease_s=0.3)


class State(TypedDict, total=False):
    order: str
    reservation: dict
    status: str


def reserve(state: State) -> State:
    def write(token: int) -> dict:
        return fakes.counter.increment("units_reserved", by=3, fence=token if args.fenced else None)

    def present(token: int) -> int:
        return fakes.counter.fence("units_reserved", token)

    key = f"{args.thread}:reserve"
    done = fenced_effect(leases, key, write, present=present if args.fenced else None, wait_s=10)
    return {"reservation": done}


def confirm(state: State) -> State:
    fakes.kv.set(f"{args.thread}:status", "reserved")
    return {"status": "reserved"}


graph = StateGraph(State)
graph.add_node("reserve", reserve)
graph.add_node("confirm", confirm)
graph.add_edge(START, "reserve")
graph.add_edge("reserve", "confirm")
graph.add_edge("confirm", END)

config = {"configurable": {"thread_id": args.thread}}
with SqliteSaver.from_conn_string(args.db) as saver:
    app = graph.compile(checkpointer=saver)
    if saver.get_tuple(config) is None:
        app.invoke({"order": "o-1"}, config, durability="sync")
    else:
        snap = app.get_state(config)
        if snap.next or snap.tasks:
            app.invoke(None, config, durability="sync")
