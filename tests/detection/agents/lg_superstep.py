"""Two nodes in one superstep: the card charge and the platform fee run in parallel.

``python lg_superstep.py --thread T --workdir W [--bug clock_key]``

Both nodes call ``payments.charge`` in the same superstep, so their ledger order differs
from run to run.  Correct: each key names its charge.  ``--bug clock_key``: the fee's key
carries the clock (DEFECT), so a fee node re-run after a kill charges the fee again.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from killdrill.fakes import connect


class Order(TypedDict, total=False):
    card_charge: str
    fee_charge: str
    receipt: str


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--bug", choices=("clock_key",))
    args = parser.parse_args()
    fakes = connect(thread=args.thread)

    def charge_card(_: Order) -> dict[str, Any]:
        time.sleep(random.uniform(0, 0.02))
        key = f"{args.thread}:card"
        charge = fakes.payments.charge(idempotency_key=key, account="acct_buyer", amount=5000)
        return {"card_charge": charge["id"]}

    def charge_fee(_: Order) -> dict[str, Any]:
        time.sleep(random.uniform(0, 0.02))
        key = f"{args.thread}:fee:{time.time_ns()}" if args.bug else f"{args.thread}:fee"  # DEFECT if bug
        charge = fakes.payments.charge(idempotency_key=key, account="acct_platform", amount=150)
        return {"fee_charge": charge["id"]}

    def receipt(state: Order) -> dict[str, Any]:
        key = f"{args.thread}:receipt"
        hook = fakes.webhooks.post(idempotency_key=key, event="charged", card=bool(state["card_charge"]))
        return {"receipt": hook["id"]}

    graph = StateGraph(Order)
    graph.add_node("charge_card", charge_card)
    graph.add_node("charge_fee", charge_fee)
    graph.add_node("receipt", receipt)
    graph.add_edge(START, "charge_card")
    graph.add_edge(START, "charge_fee")
    graph.add_edge(["charge_card", "charge_fee"], "receipt")
    graph.add_edge("receipt", END)
    config = {"configurable": {"thread_id": args.thread}}
    with SqliteSaver.from_conn_string(f"{args.workdir}/ckpt.sqlite") as saver:
        app = graph.compile(checkpointer=saver)
        resume = app.get_state(config).created_at is not None
        app.invoke(None if resume else {}, config, durability="sync")
        assert not app.get_state(config).next, "the graph did not finish"


if __name__ == "__main__":
    main()
