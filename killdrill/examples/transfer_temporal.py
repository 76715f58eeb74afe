"""A money transfer on Temporal as its sample deploys it: a worker process (the service) and a
starter process (the driver) that starts the workflow and waits for its result.

    python -m killdrill.examples.transfer_temporal worker --task-queue Q [--bug unkeyed]
    python -m killdrill.examples.transfer_temporal starter --thread T --task-queue Q

Drill the pair as deployed (the Temporal integration serves a dev server and gives every process
its address and the case's namespace)::

    killdrill drill --integration temporal \\
        --serve "worker=python -m killdrill.examples.transfer_temporal worker --task-queue {thread}" \\
        -- python -m killdrill.examples.transfer_temporal starter --thread {thread} --task-queue {thread}

``TransferWorkflow`` runs ``withdraw`` (a ``payments.charge`` of the source account) and then
``deposit`` (a ``kv.set`` of the target's balance).  Every key is the workflow id plus the
activity id, the same on each retry.  A killed worker restarts; Temporal hands its activity to
the new worker once the start-to-close timeout (2 s) expires.  A re-run starter attaches to the
running workflow (``WorkflowAlreadyStartedError``) and waits for it.  ``--bug unkeyed`` charges
without a key: a worker killed between the charge and its completion reaching the server
(``worker:during:payments.charge``, ``worker:after:withdraw``) charges twice,
``duplicate_effect``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
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

BUGS = ("unkeyed",)


@dataclass
class Transfer:
    source: str
    target: str
    amount: int


def _key() -> str:
    info = activity.info()
    return f"{info.workflow_id}/{info.activity_id}"


@activity.defn
async def withdraw(t: Transfer) -> str:
    key = None if os.environ.get("TRANSFER_BUG") == "unkeyed" else _key()
    charge = connect().payments.charge(idempotency_key=key, amount=t.amount, customer=t.source)
    return str(charge["id"])


@activity.defn
async def deposit(t: Transfer) -> str:
    connect().kv.set(f"balance/{t.target}", {"credited": t.amount, "ref": _key()})
    return f"balance/{t.target}"


@workflow.defn
class TransferWorkflow:
    @workflow.run
    async def run(self, t: Transfer) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=2),
            "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        }
        charge = await workflow.execute_activity(withdraw, t, **opts)
        credit = await workflow.execute_activity(deposit, t, **opts)
        return {"charge": charge, "credit": credit}


async def _client() -> Client:
    address = os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233")
    return await Client.connect(address, namespace=os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default"))


async def worker(task_queue: str) -> None:
    client = await _client()
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[TransferWorkflow],
        activities=[withdraw, deposit],
        max_cached_workflows=0,  # a restarted worker gets the workflow task at once
    ):
        print(f"worker polling {task_queue}", flush=True)
        await asyncio.Event().wait()


async def starter(thread: str, task_queue: str) -> dict[str, Any]:
    client = await _client()
    handle: WorkflowHandle[Any, Any]
    try:
        handle = await client.start_workflow(
            TransferWorkflow.run,
            Transfer(source="acct_42", target="acct_7", amount=4200),
            id=thread,
            task_queue=task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            task_timeout=timedelta(seconds=2),
        )
    except WorkflowAlreadyStartedError:
        handle = client.get_workflow_handle(thread)  # re-run: attach to the running workflow
    result: dict[str, Any] = await handle.result()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.transfer_temporal")
    sub = parser.add_subparsers(dest="role", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--task-queue", required=True)
    w.add_argument("--bug", choices=BUGS)
    s = sub.add_parser("starter")
    s.add_argument("--thread", required=True, help="the workflow id")
    s.add_argument("--task-queue", required=True)
    args = parser.parse_args(argv)
    if args.role == "worker":
        if args.bug:
            os.environ["TRANSFER_BUG"] = args.bug
        asyncio.run(worker(args.task_queue))
    else:
        print(json.dumps(asyncio.run(starter(args.thread, args.task_queue)), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
