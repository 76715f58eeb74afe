"""A refund service as DBOS's FastAPI samples deploy one: ``POST /orders`` starts a workflow whose
step refunds with the stripe SDK over HTTP, and answers when it is done.  Nothing here knows
killdrill.  Its driver is ``killdrill.examples.outbox_client`` (it re-sends the POST after a
connection cut).  Correct: the order is the workflow's id, so a re-sent POST attaches to the
workflow DBOS recovered; ``--bug new_id``: DBOS's default id, a second refund workflow.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import stripe
import uvicorn
from dbos import DBOS, DBOSConfig, SetWorkflowID
from fastapi import FastAPI
from pydantic import BaseModel

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--workdir", required=True)
p.add_argument("--bug", choices=("new_id",))
args = p.parse_args()

app = FastAPI()
stripe_client = stripe.StripeClient(
    "sk_test_x", base_addresses={"api": os.environ["KILLDRILL_FAKES_URL"]}, max_network_retries=0
)


@DBOS.step()
def refund(order: str, amount: int) -> str:
    intent = stripe_client.v1.payment_intents.create(
        params={"amount": amount, "currency": "gbp", "metadata": {"order": order}},
        options={"idempotency_key": f"refund-{DBOS.workflow_id}"},
    )
    return intent.id


@DBOS.workflow()
def refund_workflow(order: str, amount: int) -> dict[str, Any]:
    return {"order": order, "refund": refund(order, amount)}


class OrderRequest(BaseModel):
    order: str
    customer: str
    item: str
    quantity: int


@app.post("/orders")
def create(request: OrderRequest) -> dict[str, Any]:
    amount = 2500 * request.quantity
    if args.bug == "new_id":
        handle = DBOS.start_workflow(refund_workflow, request.order, amount)
    else:
        with SetWorkflowID(request.order):
            handle = DBOS.start_workflow(refund_workflow, request.order, amount)
    result: dict[str, Any] = handle.get_result()
    return result


os.makedirs(args.workdir, exist_ok=True)
config: DBOSConfig = {
    "name": "refunds",
    "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
    "log_level": "WARNING",
    "application_version": "refunds-1",
}
DBOS(config=config)
DBOS.launch()
uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
