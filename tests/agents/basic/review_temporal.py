"""A Temporal workflow that waits for a person twice, written as Temporal's message-passing docs
write a human in the loop: a signal handler stores the reviewer's answer and the run waits on
``workflow.wait_condition`` over it.  Under a drill the scripted human (``--answer``) sends the
signal; in production a person's client does (``handle.signal(RefundWorkflow.review, ...)``).

``python tests/agents/basic/review_temporal.py --thread T [--naive]``

``RefundWorkflow`` (id = ``--thread``): wait for the amount, activity ``charge``
(``payments.charge`` keyed by the workflow id), wait for the note, activity ``file_ticket``
(``tickets.create``, keyed).  One signal, ``review``, answers both questions: a copy of the first
answer delivered twice would answer the second.  ``--naive`` charges with no idempotency key.
The worker and the starter share the process, as the payout example's do; a resume attaches to
the running workflow.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from killdrill.fakes import connect

TASK_QUEUE = "review"


@dataclass
class Charge:
    order: str
    amount: int
    naive: bool = False


@dataclass
class Ticket:
    order: str
    note: str


@activity.defn
async def charge(c: Charge) -> str:
    key = None if c.naive else f"{activity.info().workflow_id}:charge"
    return str(connect().payments.charge(idempotency_key=key, order=c.order, amount=c.amount)["id"])


@activity.defn
async def file_ticket(t: Ticket) -> str:
    key = f"{activity.info().workflow_id}:ticket"
    return str(connect().tickets.create(idempotency_key=key, order=t.order, note=t.note)["id"])


@workflow.defn
class RefundWorkflow:
    def __init__(self) -> None:
        self._answer: Any = None

    @workflow.signal
    def review(self, answer: Any) -> None:
        """The reviewer's answer to the question the workflow waits on."""
        self._answer = answer

    async def _ask(self) -> Any:
        await workflow.wait_condition(lambda: self._answer is not None)
        answer, self._answer = self._answer, None
        return answer

    @workflow.run
    async def run(self, order: str, naive: bool) -> dict[str, Any]:
        quick: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=2),
            "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        }
        amount = int(await self._ask())
        charged = await workflow.execute_activity(charge, Charge(order, amount, naive), **quick)
        note = str(await self._ask())
        ticket = await workflow.execute_activity(file_ticket, Ticket(order, note), **quick)
        return {"charge": charged, "ticket": ticket}


async def run(thread: str, naive: bool) -> dict[str, Any]:
    address = os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233")
    namespace = os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default")
    client = await Client.connect(address, namespace=namespace)
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[RefundWorkflow],
        activities=[charge, file_ticket],
        max_cached_workflows=0,  # no sticky queue: a resumed worker gets the workflow task at once
    ):
        handle: WorkflowHandle[Any, Any]
        try:
            handle = await client.start_workflow(
                RefundWorkflow.run,
                args=["A-17", naive],
                id=thread,
                task_queue=TASK_QUEUE,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                task_timeout=timedelta(seconds=2),  # a workflow task sent to a killed worker
            )
        except WorkflowAlreadyStartedError:
            handle = client.get_workflow_handle(thread)  # a resume: attach to it
        result: dict[str, Any] = await handle.result()
        return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--thread", required=True)
    p.add_argument("--naive", action="store_true")
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args.thread, args.naive)), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
