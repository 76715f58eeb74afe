"""A refund service as a team writes one: FastAPI served by uvicorn, ``POST /refunds`` runs a
DBOS workflow whose step refunds part of a PaymentIntent with the ``stripe`` SDK.  The payment
was made before the service ever ran, so the drill declares it (``--existing``)::

    # existing.toml
    [[stripe.payment_intents]]
    id = "pi_refundable_1"
    amount = 10000
    currency = "usd"

    killdrill drill --integration dbos --http-fakes --existing existing.toml \\
        --serve "app=python -m killdrill.examples.refund_dbos --port {port} --workdir {workdir}" \\
        -- python -m killdrill.examples.refund_client --url http://127.0.0.1:{port} \\
           --refund {thread} --payment-intent pi_refundable_1 --amount 2500

The client (``killdrill.examples.refund_client``) retries as clients do (connection refused
while the app restarts, a connection cut mid-request) with the same refund id. Correct form: the
workflow's id is the refund id (a re-sent request attaches to the workflow DBOS recovers) and
the Stripe key is derived from it, so a step DBOS re-runs after a kill replays. ``--bug
new_workflow`` is DBOS's default: a new workflow id per request, and the key derived from the
workflow, so the client's re-sent POST is a second workflow with a second key, and Stripe
refunds the charge a second time (partial refunds are accepted until the amount is used up):
``duplicate_effect``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

import stripe
import uvicorn
from dbos import DBOS, DBOSConfig, SetWorkflowID
from fastapi import FastAPI
from pydantic import BaseModel

BUGS = ("new_workflow",)
app = FastAPI()
_bug: str | None = None


def _stripe() -> stripe.StripeClient:
    base = os.environ["KILLDRILL_FAKES_URL"]  # in production: Stripe's own address
    return stripe.StripeClient("sk_test_x", base_addresses={"api": base}, max_network_retries=2)


@DBOS.step()
def refund_payment(payment_intent: str, amount: int, key: str) -> str:
    refund = _stripe().v1.refunds.create(
        params={"payment_intent": payment_intent, "amount": amount, "reason": "requested_by_customer"},
        options={"idempotency_key": key},
    )
    return str(refund.id)


@DBOS.workflow()
def refund_workflow(payment_intent: str, amount: int) -> dict[str, Any]:
    key = f"refund-{DBOS.workflow_id}"  # the workflow is the refund: its id keys the call
    return {"refund": refund_payment(payment_intent, amount, key)}


class RefundRequest(BaseModel):
    refund: str
    payment_intent: str
    amount: int


@app.post("/refunds")
def create_refund(request: RefundRequest) -> dict[str, Any]:
    """Run the refund's workflow (its id is the refund: a re-sent request attaches to it) and wait."""
    if _bug == "new_workflow":  # DBOS's default: every request a new workflow
        answer: dict[str, Any] = refund_workflow(request.payment_intent, request.amount)
        return answer
    with SetWorkflowID(request.refund):
        handle = DBOS.start_workflow(refund_workflow, request.payment_intent, request.amount)
    result: dict[str, Any] = handle.get_result()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    global _bug
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workdir", required=True, help="where DBOS's system database lives")
    parser.add_argument("--bug", choices=BUGS)
    args = parser.parse_args(argv)
    _bug = args.bug
    os.makedirs(args.workdir, exist_ok=True)
    config: DBOSConfig = {
        "name": "refunds",
        "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
        "log_level": "WARNING",
        "application_version": "refunds-1",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the workflows a killed app left pending
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
