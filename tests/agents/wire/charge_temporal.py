"""A Temporal worker and starter in one process whose activities call their providers over HTTP:
``charge`` (async) with the stripe-shaped ``/fakes/payments/charge`` through ``httpx``,
``notify`` (a thread-pool activity) with a webhook through ``requests``.

``python tests/agents/wire/charge_temporal.py --thread T [--bug attempt-key]``

Nothing here knows killdrill but the base URL it reads from the environment.  Each call is keyed
by the workflow and the activity, so a retry replays it; ``--bug attempt-key`` puts Temporal's
attempt number in the keys, so a retry after a kill is a second effect.
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

with workflow.unsafe.imports_passed_through():  # the activities' clients, not the workflow's
    import httpx
    import requests

QUEUE = "wire-charge"
BUG = ""


def _key() -> str:
    info = activity.info()
    key = f"{info.workflow_id}/{info.activity_id}"
    return f"{key}/attempt-{info.attempt}" if BUG == "attempt-key" else key


@activity.defn
async def charge(amount: int) -> str:
    async with httpx.AsyncClient(base_url=os.environ["KILLDRILL_FAKES_URL"]) as http:
        r = await http.post(
            "/fakes/payments/charge",
            json={"amount": amount, "currency": "usd"},
            headers={"Idempotency-Key": _key()},
        )
    r.raise_for_status()
    return str(r.json()["id"])


@activity.defn
def notify(charge_id: str) -> str:
    r = requests.post(
        os.environ["KILLDRILL_FAKES_URL"] + "/hooks/notify",
        json={"event": "charged", "amount": 4200},
        headers={"Idempotency-Key": _key()},
        timeout=10,
    )
    r.raise_for_status()
    return str(r.json()["id"])


@workflow.defn
class ChargeWorkflow:
    @workflow.run
    async def run(self, amount: int) -> str:
        retry = RetryPolicy(
            initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
        )
        quick = {"start_to_close_timeout": timedelta(seconds=2), "retry_policy": retry}
        charged = await workflow.execute_activity(charge, amount, **quick)  # type: ignore[arg-type]
        return await workflow.execute_activity(notify, charged, **quick)  # type: ignore[arg-type]


async def main(thread: str) -> None:
    client = await Client.connect(
        os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233"),
        namespace=os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default"),
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        async with Worker(
            client,
            task_queue=QUEUE,
            workflows=[ChargeWorkflow],
            activities=[charge, notify],
            activity_executor=pool,
            max_cached_workflows=0,
        ):
            try:
                handle = await client.start_workflow(
                    ChargeWorkflow.run,
                    4200,
                    id=thread,
                    task_queue=QUEUE,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    task_timeout=timedelta(seconds=2),
                )
            except WorkflowAlreadyStartedError:
                handle = client.get_workflow_handle(thread)
            print(await handle.result(), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--bug", choices=("attempt-key",), default="")
    args = parser.parse_args()
    BUG = args.bug
    asyncio.run(main(args.thread))
