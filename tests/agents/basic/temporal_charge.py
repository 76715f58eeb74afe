"""A Temporal workflow with one activity, ``charge``, and a start-to-close timeout the user chose.

``python tests/agents/basic/temporal_charge.py --thread T [--start-to-close S]``

The worker and the starter are this one process (as the bundled payout example): it starts the
workflow with id ``T`` or attaches to it when a killed attempt started it.  ``charge`` is keyed
by the workflow and the activity, so a retry replays the charge.  A worker killed inside
``charge`` leaves the activity with the server until its start-to-close timeout expires (no
heartbeat timeout is set): the resume waits that long for it, and the drill says so.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from killdrill.fakes import connect

QUEUE = "charge"


@activity.defn
def charge(amount: int) -> str:
    info = activity.info()
    key = f"{info.workflow_id}/{info.activity_id}"
    return str(connect().payments.charge(idempotency_key=key, amount=amount, currency="usd")["id"])


@workflow.defn
class ChargeWorkflow:
    @workflow.run
    async def run(self, args: tuple[int, float]) -> str:
        amount, start_to_close = args
        return await workflow.execute_activity(
            charge,
            amount,
            start_to_close_timeout=timedelta(seconds=start_to_close),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        )


async def main(thread: str, start_to_close: float) -> None:
    client = await Client.connect(
        os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233"),
        namespace=os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default"),
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        async with Worker(
            client,
            task_queue=QUEUE,
            workflows=[ChargeWorkflow],
            activities=[charge],
            activity_executor=pool,
            max_cached_workflows=0,
        ):
            try:
                handle = await client.start_workflow(
                    ChargeWorkflow.run,
                    (4200, start_to_close),
                    id=thread,
                    task_queue=QUEUE,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                )
            except WorkflowAlreadyStartedError:
                handle = client.get_workflow_handle(thread)
            print(await handle.result(), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--start-to-close", type=float, default=3.0)
    args = parser.parse_args()
    asyncio.run(main(args.thread, args.start_to_close))
