"""The graph and workflow of ``billing_langgraph_temporal.py``, in a module of their own: Temporal's
LangGraph plugin runs each node as an activity named after where it is defined (never ``__main__``)."""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.contrib.langgraph import graph

with workflow.unsafe.imports_passed_through():
    from killdrill.fakes import connect

RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1))
NODE = {"execute_in": "activity", "start_to_close_timeout": timedelta(seconds=2), "retry_policy": RETRY}


class Order(TypedDict, total=False):
    order: str
    charge: str
    receipt: str


def charge(state: Order) -> Order:
    key = f"{activity.info().workflow_id}-charge"
    done = connect().payments.charge(
        idempotency_key=key, amount=4200, currency="usd", customer=state["order"]
    )
    return {"charge": str(done["id"])}


def receipt(state: Order) -> Order:
    connect().kv.set(f"receipt/{state['order']}", state["charge"])
    return {"receipt": "sent"}


builder = StateGraph(Order)
builder.add_node("charge", charge, metadata=NODE)
builder.add_node("receipt", receipt, metadata=NODE)
builder.add_edge(START, "charge")
builder.add_edge("charge", "receipt")
builder.add_edge("receipt", END)


@workflow.defn
class BillingGraph:
    @workflow.run
    async def run(self, order: str) -> str:
        result = await graph("billing").compile().ainvoke({"order": order})
        return str(result["receipt"])
