"""The Temporal probe: ``reserve -> charge -> notify`` as activities of one workflow, one worker.

    python -m killdrill.conform.probes.temporal_probe --thread T --workdir DIR

Written as Temporal's docs say (and as ``killdrill.examples.payout_temporal``, whose drill settings
it shares): the workflow id is the thread, a resume is the same command (the start is refused and
it attaches), every key is the workflow id and ``activity.info().activity_id``: Temporal's
recommended idempotency key.  The durable state lives in the drill's Temporal server, not in
``--workdir`` (so a workdir copy is no fork: the table says n/a).  ``--interrupt``: before
``notify`` the workflow waits for a human's ``approve`` signal (``workflow.wait_condition``), and
the approved notice is an email sent by an activity (``mailbox.send``, keyed by nothing); a
process that finds the workflow waiting (the ``waiting`` query) delivers the signal, the point
``before:deliver`` marking the start of a delivery, as an approval webhook would.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    import killdrill
    from killdrill.conform.probes._common import parse
    from killdrill.fakes import connect

QUEUE = "conform-probe"


def _key() -> str:
    info = activity.info()
    return f"{info.workflow_id}/{info.activity_id}"


@activity.defn
async def reserve(customer: str) -> str:
    info = activity.info()
    connect().kv.set(f"hold/{info.workflow_id}", {"customer": customer, "amount": 4200})
    return f"hold/{info.workflow_id}"


@activity.defn
def charge(customer: str) -> str:
    c = connect().payments.charge(idempotency_key=_key(), amount=4200, currency="usd", customer=customer)
    return str(c["id"])


@activity.defn
async def notify(charge_id: str) -> str:
    posted = connect().webhooks.post(idempotency_key=_key(), event="charged", charge=charge_id)
    return str(posted["id"])


@activity.defn
async def email(body: str) -> str:
    sent = connect().mailbox.send(to="billing@acme.example", subject="Charged", body=body)
    return str(sent["id"])


@workflow.defn
class ProbeWorkflow:
    def __init__(self) -> None:
        self.decision: str | None = None
        self.parked = False

    @workflow.signal
    def approve(self, decision: str) -> None:
        self.decision = decision

    @workflow.query
    def waiting(self) -> bool:
        return self.parked and self.decision is None

    @workflow.run
    async def run(self, customer: str, interrupt: bool) -> str:
        retry = RetryPolicy(
            initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
        )
        quick: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=2), "retry_policy": retry}
        await workflow.execute_activity(reserve, customer, **quick)
        charge_id = await workflow.execute_activity(charge, customer, **quick)
        if interrupt:
            self.parked = True
            await workflow.wait_condition(lambda: self.decision is not None)
            return await workflow.execute_activity(email, f"{self.decision}: {charge_id}", **quick)
        return await workflow.execute_activity(notify, charge_id, **quick)


async def run(thread: str, interrupt: bool, approval: str) -> str:
    address = os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233")
    namespace = os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default")
    client = await Client.connect(address, namespace=namespace)
    with ThreadPoolExecutor(max_workers=2) as executor:
        async with Worker(
            client,
            task_queue=QUEUE,
            workflows=[ProbeWorkflow],
            activities=[reserve, charge, notify, email],
            activity_executor=executor,
            max_cached_workflows=0,
        ):
            handle: WorkflowHandle[Any, Any]
            try:
                handle = await client.start_workflow(
                    ProbeWorkflow.run,
                    args=["acme", interrupt],
                    id=thread,
                    task_queue=QUEUE,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    task_timeout=timedelta(seconds=2),
                )
            except WorkflowAlreadyStartedError:
                handle = client.get_workflow_handle(thread)
            if interrupt:
                await deliver(handle, approval)
            return str(await handle.result())


async def deliver(handle: WorkflowHandle[Any, Any], approval: str) -> None:
    """As the approval webhook: once the workflow waits for a human, send the decision (unless
    the workflow already finished: then there is nothing to deliver)."""
    while True:
        desc = await handle.describe()
        if desc.status is not None and desc.status.name != "RUNNING":
            return
        if await handle.query(ProbeWorkflow.waiting):
            break
        await asyncio.sleep(0.05)
    killdrill.boundary("before:deliver")
    await handle.signal(ProbeWorkflow.approve, approval)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse("temporal_probe", argv)
    print(asyncio.run(run(args.thread, args.interrupt, args.approval)), flush=True)
    sys.stderr.flush()
    os._exit(0)  # sdk-python#300: the SDK can abort at interpreter exit once the workflow closed


if __name__ == "__main__":
    main()
