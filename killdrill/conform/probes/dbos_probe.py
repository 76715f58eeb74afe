"""The DBOS probe: ``reserve -> charge -> notify`` as ``@DBOS.step`` steps of one ``@DBOS.workflow``.

    python -m killdrill.conform.probes.dbos_probe --thread T --workdir DIR [--interrupt]

Written as DBOS's docs say (and as ``killdrill.examples.payout_dbos``): the system database is
SQLite under ``--workdir``, the workflow id is the thread (``SetWorkflowID``), a resume is the same
command (``DBOS.launch()`` recovers the pending workflow, recorded steps are replayed from their
record, and ``DBOS.start_workflow`` under the same id attaches to it), every key is the workflow id
and the step's name.  ``--interrupt``: after ``charge`` the workflow publishes that it waits for a
human (``DBOS.set_event("awaiting_approval", True)``) and receives the decision
(``DBOS.recv("approval")``, the checkout tutorial's pattern), then an ``email`` step sends the
approved notice (``mailbox.send``, keyed by nothing: what consuming the value causes); a process
that finds the event set while the workflow is pending delivers the decision with
``DBOS.send(thread, approval, topic="approval")`` as the approval webhook would, the point
``before:deliver`` marking the start of a delivery.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

import killdrill
from killdrill.conform.probes._common import parse
from killdrill.fakes import connect

TOPIC = "approval"
AWAITING = "awaiting_approval"


def _fakes() -> Any:
    return connect()  # per call: steps run on DBOS's executor threads


@DBOS.step()
def reserve(customer: str) -> str:
    hold = f"hold/{DBOS.workflow_id}"
    _fakes().kv.set(hold, {"customer": customer, "amount": 4200})
    return hold


@DBOS.step()
def charge(customer: str) -> str:
    c = _fakes().payments.charge(
        idempotency_key=f"{DBOS.workflow_id}-charge", amount=4200, currency="usd", customer=customer
    )
    return str(c["id"])


@DBOS.step()
def notify(charge_id: str) -> str:
    posted = _fakes().webhooks.post(
        idempotency_key=f"{DBOS.workflow_id}-notify", event="charged", charge=charge_id
    )
    return str(posted["id"])


@DBOS.step()
def email(body: str) -> str:
    sent = _fakes().mailbox.send(to="billing@acme.example", subject="Charged", body=body)
    return str(sent["id"])


@DBOS.workflow()
def probe(customer: str, interrupt: bool) -> str:
    reserve(customer)
    charge_id = charge(customer)
    if interrupt:
        DBOS.set_event(AWAITING, True)
        decision = DBOS.recv(TOPIC, timeout_seconds=3600)
        DBOS.set_event(AWAITING, False)
        return email(f"{decision}: {charge_id}")
    return notify(charge_id)


def deliver(thread: str, approval: str) -> None:
    """As the approval webhook: once the workflow waits for a human, send the decision (unless it
    finished or no longer waits: then there is nothing to deliver)."""
    while True:
        status = DBOS.get_workflow_status(thread)
        if status is None or status.status not in ("PENDING", "ENQUEUED"):
            return
        waiting = DBOS.get_event(thread, AWAITING, timeout_seconds=0.2)
        if waiting is True:
            break
        if waiting is False:
            return
        time.sleep(0.05)
    killdrill.boundary("before:deliver")
    DBOS.send(thread, approval, topic=TOPIC)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse("dbos_probe", argv)
    config: DBOSConfig = {
        "name": "conform-probe",
        "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's pending workflows (a killed attempt's)
    try:
        with SetWorkflowID(args.thread):
            handle = DBOS.start_workflow(probe, "acme", args.interrupt)
        if args.interrupt:
            deliver(args.thread, args.approval)
        print(handle.get_result(), flush=True)
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
