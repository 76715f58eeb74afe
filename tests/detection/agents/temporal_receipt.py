"""A charge and its receipt on Temporal, written the way Temporal's documentation writes one.

    python temporal_receipt.py --thread T --workdir W [--bug attempt_key] [--address HOST:PORT]

Starter and worker in one command; two sync activities on a ``ThreadPoolExecutor``, ``charge``
then ``send_receipt``; ``start_to_close_timeout`` 3 s and the default ``RetryPolicy``.  The
receipt's body names the charge's id.  The correct agent keys the charge by the workflow and the
activity (the same on every attempt).

``--bug attempt_key``: the charge's key includes ``activity.info().attempt`` ("each retry is a new
request"), so a worker killed after the provider charged and before the server heard of it charges
again on the retry, and the receipt names the second charge.

``--address HOST:PORT``: a server the user runs (namespace ``default``); the Temporal integration
sends the client to the case's server and namespace instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from killdrill.fakes import connect

BUG = {"value": ""}


@activity.defn
def charge(customer: str) -> str:
    info = activity.info()
    if BUG["value"] == "attempt_key":
        key = f"{info.workflow_id}:charge:{info.attempt}"  # DEFECT: each retry is a new request
    else:
        key = f"{info.workflow_id}:charge"
    return str(
        connect().payments.charge(idempotency_key=key, amount=4200, currency="usd", customer=customer)["id"]
    )


@activity.defn
def send_receipt(charge_id: str) -> str:
    """An email cannot be deduped: a retry first asks the provider whether it was delivered."""
    mailbox = connect().mailbox
    ref = f"{activity.info().workflow_id}:receipt"
    sent = mailbox.lookup(ref)
    if sent is None:
        body = f"We charged 42.00 USD ({charge_id})."
        sent = mailbox.send(to="billing@acme.example", subject="Your receipt", body=body, ref=ref)
    return str(sent["id"])


@workflow.defn
class ChargeWorkflow:
    @workflow.run
    async def run(self, customer: str) -> str:
        charge_id = await workflow.execute_activity(
            charge, customer, start_to_close_timeout=timedelta(seconds=3)
        )
        return await workflow.execute_activity(
            send_receipt, charge_id, start_to_close_timeout=timedelta(seconds=3)
        )


async def main(thread: str, address: str) -> None:
    if address:
        client = await Client.connect(address)
    else:
        client = await Client.connect(
            os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233"),
            namespace=os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default"),
        )
    with ThreadPoolExecutor(max_workers=4) as executor:
        async with Worker(
            client,
            task_queue="receipts",
            workflows=[ChargeWorkflow],
            activities=[charge, send_receipt],
            activity_executor=executor,
        ):
            try:
                handle = await client.start_workflow(
                    ChargeWorkflow.run,
                    "cus_acme",
                    id=thread,
                    task_queue="receipts",
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                )
            except WorkflowAlreadyStartedError:
                handle = client.get_workflow_handle(thread)
            print(await handle.result(), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--bug", choices=("attempt_key",), default="")
    parser.add_argument("--address", default="", help="a server the user runs, not the drill's")
    args = parser.parse_args()
    BUG["value"] = args.bug
    asyncio.run(main(args.thread, args.address))
