"""A payout on Temporal, written as users write one: a workflow, its activities, one worker.

``python -m killdrill.examples.payout_temporal --thread T [--bug attempt-key|uuid-key|no-heartbeat]``

One command is the whole agent: it connects (``KILLDRILL_TEMPORAL_ADDRESS`` /
``KILLDRILL_TEMPORAL_NAMESPACE``, else ``localhost:7233`` / ``default``), runs a worker, starts the
workflow with workflow id ``T`` unless it is already started, waits for its result, prints it and
exits.  A resume is the very same command: the start is refused (``WorkflowAlreadyStartedError``,
with ``REJECT_DUPLICATE`` so a closed workflow is not started again either) and the command
attaches to the workflow; the server hands the killed worker's activities to this worker once
their start-to-close or heartbeat timeout expires.

Activities, in order: ``reserve_funds`` (async, an idempotent ``kv.set``), ``charge_customer``
(sync, thread pool: ``payments.charge``), ``settle_batch`` (sync, a long body: one ticket per
line, heartbeating its progress) and ``send_receipt`` (async: a keyed webhook).  Every key is
derived from what the effect is: the workflow id and the activity id (``activity.info()``),
which are the same on every attempt of that activity, plus the line for the batch.

``--bug`` plants a mistake common in the field:

``attempt-key``
    the charge's key includes ``activity.info().attempt``: every retry is a new key, so a worker
    killed after the charge and before its completion reached the server charges again.
``uuid-key``
    the charge's key is ``uuid4()``: the same, on every retry.
``no-heartbeat``
    ``settle_batch`` neither heartbeats nor sets a heartbeat timeout, only a long start-to-close
    (the time the whole body may take).  A worker killed mid-body leaves the activity with the
    server until that timeout expires: the resume waits for it and the drill reports ``hang``.

Drill settings (see the README): short activity timeouts (start-to-close 2 s; heartbeat 1 s for
the long activity) and a retry's first interval of 100 ms.  Temporal's own defaults otherwise:
the drill resets a dead worker's sticky queue and its dev server hands on a workflow task a
killed worker had started after 3 s.  The process ends as any
does: when the SDK aborts at interpreter exit after the workflow closed (sdk-python#300, exit
134), the drill's Temporal integration knows it (the last point was ``after:workflow.TYPE``)
and counts a clean exit with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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

TASK_QUEUE = "payout"
BUGS = ("attempt-key", "uuid-key", "no-heartbeat")
LINES = 4
"""Lines of the settlement batch (one ticket each)."""
LINE_S = 0.15
"""How long a line of the batch takes: the body is long next to the other activities."""


@dataclass
class Payout:
    account: str
    amount: int
    email: str
    bug: str = ""


def _fakes() -> Any:
    return connect()


def _key(suffix: str = "") -> str:
    """The effect's identity: the workflow and the activity, never the attempt."""
    info = activity.info()
    return f"{info.workflow_id}/{info.activity_id}{suffix}"


@activity.defn
async def reserve_funds(p: Payout) -> str:
    _fakes().kv.set(f"reserved/{p.account}", p.amount)
    return f"reserved/{p.account}"


@activity.defn
def charge_customer(p: Payout) -> str:
    info = activity.info()
    if p.bug == "attempt-key":
        key = f"{info.workflow_id}/{info.activity_id}/attempt-{info.attempt}"
    elif p.bug == "uuid-key":
        key = str(uuid.uuid4())
    else:
        key = _key()
    charge = _fakes().payments.charge(
        idempotency_key=key, amount=p.amount, currency="usd", customer=p.account
    )
    return str(charge["id"])


@activity.defn
def settle_batch(p: Payout) -> int:
    """One ticket per line; with heartbeats a retry continues from the last line reported."""
    fakes = _fakes()
    details = activity.info().heartbeat_details
    start = int(details[0]) + 1 if details and p.bug != "no-heartbeat" else 0
    for line in range(start, LINES):
        time.sleep(LINE_S)  # the slow part of the body (a file to parse, a partner API to page)
        fakes.tickets.create(idempotency_key=_key(f"/line-{line}"), account=p.account, line=line)
        if p.bug != "no-heartbeat":
            activity.heartbeat(line)
    return LINES


@activity.defn
async def send_receipt(p: Payout) -> str:
    post = _fakes().webhooks.post(idempotency_key=_key(), to=p.email, event="payout.paid", amount=p.amount)
    return str(post["id"])


@workflow.defn
class PayoutWorkflow:
    @workflow.run
    async def run(self, p: Payout) -> dict[str, Any]:
        retry = RetryPolicy(
            initial_interval=timedelta(milliseconds=100), maximum_interval=timedelta(seconds=1)
        )
        quick: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=2), "retry_policy": retry}
        reserved = await workflow.execute_activity(reserve_funds, p, **quick)
        charge = await workflow.execute_activity(charge_customer, p, **quick)
        if p.bug == "no-heartbeat":
            lines = await workflow.execute_activity(
                settle_batch, p, start_to_close_timeout=timedelta(minutes=5), retry_policy=retry
            )
        else:
            lines = await workflow.execute_activity(
                settle_batch,
                p,
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=1),
                retry_policy=retry,
            )
        receipt = await workflow.execute_activity(send_receipt, p, **quick)
        return {"reserved": reserved, "charge": charge, "lines": lines, "receipt": receipt}


async def run(thread: str, bug: str) -> dict[str, Any]:
    address = os.environ.get("KILLDRILL_TEMPORAL_ADDRESS", "localhost:7233")
    namespace = os.environ.get("KILLDRILL_TEMPORAL_NAMESPACE", "default")
    client = await Client.connect(address, namespace=namespace)
    with ThreadPoolExecutor(max_workers=4) as executor:
        async with Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=[PayoutWorkflow],
            activities=[reserve_funds, charge_customer, settle_batch, send_receipt],
            activity_executor=executor,
        ):
            payout = Payout(account="acct_42", amount=4200, email="ada@example.com", bug=bug)
            handle: WorkflowHandle[Any, Any]
            try:
                handle = await client.start_workflow(
                    PayoutWorkflow.run,
                    payout,
                    id=thread,
                    task_queue=TASK_QUEUE,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                )
            except WorkflowAlreadyStartedError:
                handle = client.get_workflow_handle(thread)  # a resume: attach to it
            result: dict[str, Any] = await handle.result()
            return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.payout_temporal", description=__doc__)
    parser.add_argument("--thread", required=True, help="the workflow id")
    parser.add_argument("--bug", choices=BUGS, default="", help="plant a common mistake")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.thread, args.bug))
    print(json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
