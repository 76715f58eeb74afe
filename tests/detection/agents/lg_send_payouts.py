"""Parallel payouts: a LangGraph ``Send`` fan-out pays three payees in parallel branches.

``python lg_send_payouts.py --thread T --workdir W [--bug uuid_key|index_key]``

Correct: each branch's key names its payee (thread, account, amount), so a re-run branch
replays.  The branches land in any order (each waits a random network latency first).
``--bug uuid_key``: the branch mints its key with uuid4, new on every attempt (DEFECT):
a branch re-run after a kill pays again.  ``--bug index_key``: the key is the branch's
index in a list built from a set, whose order differs per process (hash randomization),
so a resumed attempt may pay payee B under C's index (DEFECT): B twice, C never.
"""

from __future__ import annotations

import argparse
import operator
import random
import time
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from killdrill.fakes import connect

PAYEES = {"acct_alice": 1200, "acct_bob": 3400, "acct_carol": 560}


class Batch(TypedDict, total=False):
    paid: Annotated[list[str], operator.add]
    total: int


class Branch(TypedDict):
    account: str
    index: int


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--bug", choices=("uuid_key", "index_key"))
    args = parser.parse_args()
    fakes = connect(thread=args.thread)

    def fan_out(_: Batch) -> list[Send]:
        # DEFECT (index_key): a set's order differs per process
        accounts = list(set(PAYEES)) if args.bug == "index_key" else sorted(PAYEES)
        return [Send("pay", {"account": a, "index": i}) for i, a in enumerate(accounts)]

    def pay(branch: Branch) -> dict[str, Any]:
        time.sleep(random.uniform(0, 0.02))  # network latency: branches land in any order
        account = branch["account"]
        if args.bug == "uuid_key":
            key = f"payout-{uuid.uuid4()}"  # DEFECT: new on every attempt
        elif args.bug == "index_key":
            key = f"{args.thread}:payout:{branch['index']}"
            account = list(set(PAYEES))[branch["index"]]  # DEFECT: index -> payee differs per process
        else:
            key = f"{args.thread}:payout:{account}:{PAYEES[account]}"
        charge = fakes.payments.charge(idempotency_key=key, account=account, amount=PAYEES[account])
        return {"paid": [charge["id"]]}

    def settle(state: Batch) -> dict[str, Any]:
        return {"total": len(state["paid"])}

    graph = StateGraph(Batch)
    graph.add_node("start_batch", lambda _: {"paid": []})
    graph.add_node("pay", pay)
    graph.add_node("settle", settle)
    graph.add_edge(START, "start_batch")
    graph.add_conditional_edges("start_batch", fan_out, ["pay"])
    graph.add_edge("pay", "settle")
    graph.add_edge("settle", END)
    config = {"configurable": {"thread_id": args.thread}}
    with SqliteSaver.from_conn_string(f"{args.workdir}/ckpt.sqlite") as saver:
        app = graph.compile(checkpointer=saver)
        snapshot = app.get_state(config)
        resume = snapshot.created_at is not None  # a checkpoint exists: continue, never restart
        app.invoke(None if resume else {"paid": []}, config, durability="sync")
        assert not app.get_state(config).next, "the graph did not finish"


if __name__ == "__main__":
    main()
