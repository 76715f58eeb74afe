"""A DBOS agent that waits for a person twice, written as DBOS's human-in-the-loop example (the
"agent inbox") writes one: the workflow publishes its status with ``DBOS.set_event`` and waits in
``DBOS.recv("approval")``; an approver's endpoint answers with ``DBOS.send(workflow_id, answer,
"approval")``.  Under a drill the scripted human (``--answer``) is that endpoint.

``python tests/agents/basic/inbox_dbos.py --thread T --workdir DIR [--async] [--naive] [--wait S]``

Workflow ``refund`` (id = ``--thread``): ``recv`` the amount, step ``charge`` (``payments.charge``
keyed by the workflow id), ``recv`` the note, step ``file_ticket`` (``tickets.create``, keyed).
Both questions share one topic, as an inbox's approvals do: an answer sent twice would reach the
second question.  ``--naive`` charges with no idempotency key (a kill after the charge, before
DBOS recorded the step, charges twice).  ``--async`` runs the same workflow as coroutines
(``recv_async``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

from killdrill.fakes import connect

ORDER = "A-17"
naive = False
wait = 30.0  # seconds a question waits for its approver (--wait)


def _charge(order: str, amount: int) -> str:
    key = None if naive else f"{DBOS.workflow_id}:charge"
    return str(connect().payments.charge(idempotency_key=key, order=order, amount=amount)["id"])


def _file(order: str, note: str) -> str:
    key = f"{DBOS.workflow_id}:ticket"
    return str(connect().tickets.create(idempotency_key=key, order=order, note=note)["id"])


@DBOS.step()
def charge(order: str, amount: int) -> str:
    return _charge(order, amount)


@DBOS.step()
def file_ticket(order: str, note: str) -> str:
    return _file(order, note)


@DBOS.workflow()
def refund(order: str) -> dict[str, Any]:
    DBOS.set_event("status", "waiting for the amount")
    amount = DBOS.recv("approval", timeout_seconds=wait)
    if amount is None:
        return {"status": "no answer"}
    charged = charge(order, int(amount))
    DBOS.set_event("status", "waiting for the note")
    note = DBOS.recv("approval", timeout_seconds=wait)
    if note is None:
        return {"status": "no answer"}
    return {"status": "done", "charge": charged, "ticket": file_ticket(order, str(note))}


@DBOS.step()
async def charge_async(order: str, amount: int) -> str:
    return _charge(order, amount)


@DBOS.step()
async def file_ticket_async(order: str, note: str) -> str:
    return _file(order, note)


@DBOS.workflow()
async def refund_async(order: str) -> dict[str, Any]:
    await DBOS.set_event_async("status", "waiting for the amount")
    amount = await DBOS.recv_async("approval", timeout_seconds=wait)
    if amount is None:
        return {"status": "no answer"}
    charged = await charge_async(order, int(amount))
    await DBOS.set_event_async("status", "waiting for the note")
    note = await DBOS.recv_async("approval", timeout_seconds=wait)
    if note is None:
        return {"status": "no answer"}
    return {"status": "done", "charge": charged, "ticket": await file_ticket_async(order, str(note))}


async def run_async(thread: str) -> dict[str, Any]:
    with SetWorkflowID(thread):
        handle = await DBOS.start_workflow_async(refund_async, ORDER)
    return await handle.get_result()


def main() -> int:
    global naive, wait
    p = argparse.ArgumentParser()
    p.add_argument("--thread", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--async", dest="use_async", action="store_true")
    p.add_argument("--naive", action="store_true")
    p.add_argument("--wait", type=float, default=30.0)
    args = p.parse_args()
    naive, wait = args.naive, args.wait
    os.makedirs(args.workdir, exist_ok=True)
    config: DBOSConfig = {
        "name": "inbox",
        "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the workflow a killed attempt left waiting
    try:
        if args.use_async:
            result = asyncio.run(run_async(args.thread))
        else:
            with SetWorkflowID(args.thread):
                handle = DBOS.start_workflow(refund, ORDER)
            result = handle.get_result()
        print(result, flush=True)
    finally:
        DBOS.destroy()
    return 0 if result.get("status") == "done" else 3


if __name__ == "__main__":
    sys.exit(main())
