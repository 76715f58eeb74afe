"""An order service as DBOS's transactional-outbox sample deploys it: a FastAPI app served by
uvicorn, ``POST /orders`` starts a workflow that records the order and sends its notification
email in a step.  Drill it with its client as the driver::

    killdrill drill --integration dbos \\
        --serve "app=python -m killdrill.examples.outbox_dbos --port {port} --workdir {workdir}" \\
        -- python -m killdrill.examples.outbox_client --url http://127.0.0.1:{port} --order {thread}

The app keeps DBOS's system database in ``--workdir`` (SQLite); when a kill restarts it, DBOS
recovers the pending workflow on launch, and the client's retry (same order id: the workflow id)
waits for that workflow's result.  Correct form: the notification step looks its message up
before it sends (``mailbox.lookup(ref)``), so a send that landed before DBOS recorded the step
is not sent again.  ``--bug unkeyed`` sends without the lookup: a kill between the send and the
step's record (``app:during:mailbox.send``, ``app:after:send_order_notification``) sends the email
twice, ``duplicate_effect``.  ``--bug server_id`` is the published sample's request handling:
the app numbers the order itself and starts each request's workflow under a new id (DBOS's
default), so a POST the client re-sends after the app died mid-request is a second order beside
the first (which DBOS recovers): ``unexpected_effect``, cause ``work_resubmitted``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from collections.abc import Sequence
from typing import Any

import uvicorn
from dbos import DBOS, DBOSConfig, SetWorkflowID
from fastapi import FastAPI
from pydantic import BaseModel

from killdrill.fakes import connect

BUGS = ("unkeyed", "server_id")
app = FastAPI()
_bug: str | None = None
_workdir = ""


@DBOS.step()
def insert_order(order: str, customer: str, item: str, quantity: int) -> str:
    """The order's row (an upsert: a step re-run after a kill converges)."""
    connect().kv.set(key=f"orders/{order}", value={"customer": customer, "item": item, "quantity": quantity})
    return order


@DBOS.step()
def send_order_notification(order: str, customer: str, item: str) -> None:
    """The confirmation email: irreversible, so the step asks the mailbox first."""
    mailbox = connect().mailbox
    ref = f"order-{order}-confirmation"
    if _bug == "unkeyed" or mailbox.lookup(ref) is None:
        mailbox.send(to=f"{customer}@example.com", subject=f"Order {order}", body=f"1x {item}", ref=ref)


@DBOS.step()
def update_notification_status(order: str, status: str) -> None:
    connect().kv.set(key=f"orders/{order}/notification", value=status)


@DBOS.workflow()
def place_order_workflow(order: str, customer: str, item: str, quantity: int) -> dict[str, Any]:
    return _place(order, customer, item, quantity)


def _place(order: str, customer: str, item: str, quantity: int) -> dict[str, Any]:
    insert_order(order, customer, item, quantity)
    send_order_notification(order, customer, item)
    update_notification_status(order, "SENT")
    return {"order_id": order, "notification": "SENT"}


class OrderRequest(BaseModel):
    order: str
    customer: str
    item: str
    quantity: int


@DBOS.step()
def number_order(customer: str) -> str:
    """``--bug server_id``: the order's number, the app's own (a row in its database)."""
    with sqlite3.connect(os.path.join(_workdir, "orders.sqlite")) as db:
        db.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT)")
        return str(db.execute("INSERT INTO orders (customer) VALUES (?)", (customer,)).lastrowid)


@DBOS.workflow()
def numbered_order_workflow(customer: str, item: str, quantity: int) -> dict[str, Any]:
    return _place(number_order(customer), customer, item, quantity)


@app.post("/orders")
def create_order(request: OrderRequest) -> dict[str, Any]:
    """Start the order's workflow (its id is the order: a retry attaches to the same one) and wait."""
    if _bug == "server_id":  # a new workflow id per request: a re-sent request is a new order
        numbered = DBOS.start_workflow(
            numbered_order_workflow, request.customer, request.item, request.quantity
        )
        answer: dict[str, Any] = numbered.get_result()
        return answer
    with SetWorkflowID(request.order):
        handle = DBOS.start_workflow(
            place_order_workflow, request.order, request.customer, request.item, request.quantity
        )
    result: dict[str, Any] = handle.get_result()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    global _bug, _workdir
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workdir", required=True, help="where DBOS's system database lives")
    parser.add_argument("--bug", choices=BUGS)
    args = parser.parse_args(argv)
    _bug, _workdir = args.bug, args.workdir
    os.makedirs(args.workdir, exist_ok=True)
    config: DBOSConfig = {
        "name": "transactional-outbox",
        "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
        "log_level": "WARNING",
        "application_version": "outbox-1",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the workflows a killed app left pending
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
