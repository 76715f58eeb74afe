"""A refund service written as DBOS's FastAPI guide writes one: ``DBOS.launch()`` in the app's
lifespan, served by ``uvicorn refund_app:app``, ``POST /refunds`` starts a ``@DBOS.workflow()``
whose ``@DBOS.step()`` refunds through the stripe SDK (``STRIPE_API_BASE``: the drill's HTTP
fakes), keyed by the workflow id.  DBOS's system database is ``DBOS_SYSTEM_DATABASE_URL``.

Correct form: the workflow id is the client's request id (``SetWorkflowID``), so a re-sent POST
attaches to the workflow the first one started.  ``REFUND_BUG=new_id``: DBOS's default, a new
workflow id per POST, so the client's retry after a kill starts a second refund workflow beside
the first (which DBOS recovers on launch): two refunds under two keys."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import stripe
from dbos import DBOS, DBOSConfig, SetWorkflowID
from fastapi import FastAPI
from pydantic import BaseModel


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    DBOS.launch()  # recovers the workflows a killed app left pending
    yield


app = FastAPI(lifespan=lifespan)
config: DBOSConfig = {"name": "refunds", "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"]}
DBOS(config=config)
stripe_client = stripe.StripeClient("sk_test_x", base_addresses={"api": os.environ["STRIPE_API_BASE"]})


class RefundRequest(BaseModel):
    request_id: str
    payment_intent: str
    amount: int


@DBOS.step()
def refund(payment_intent: str, amount: int) -> str:
    """The refund, keyed by its workflow: a step re-run after a kill replays it."""
    created = stripe_client.v1.refunds.create(
        params={"payment_intent": payment_intent, "amount": amount},
        options={"idempotency_key": f"{DBOS.workflow_id}-refund"},
    )
    return str(created.id)


@DBOS.workflow()
def refund_workflow(payment_intent: str, amount: int) -> dict[str, Any]:
    return {"refund": refund(payment_intent, amount), "workflow": DBOS.workflow_id}


@app.post("/refunds")
def create_refund(request: RefundRequest) -> dict[str, Any]:
    if os.environ.get("REFUND_BUG") == "new_id":
        handle = DBOS.start_workflow(refund_workflow, request.payment_intent, request.amount)
    else:
        with SetWorkflowID(f"refund-{request.request_id}"):
            handle = DBOS.start_workflow(refund_workflow, request.payment_intent, request.amount)
    result: dict[str, Any] = handle.get_result()
    return result
