"""A Celery order task that charges the order (a keyed charge) and writes its receipt row into
the app's own database, as users write one: ``tasks.py`` with ``acks_late=True``,
``task_reject_on_worker_lost=True`` and ``worker_prefetch_multiplier=1``, a worker and a submitter.
``DATABASE_URL`` names the database (SQLAlchemy); the broker comes from ``CELERY_BROKER_URL``.

Correct: ``order_id`` is unique and the row is written with ``INSERT ... ON CONFLICT DO NOTHING``,
so a task the broker delivers again (its worker killed before the ack) finds the first row.
``--bug plain`` (the submitter's): a plain ``INSERT`` into a table without the unique
constraint, so the redelivered task writes a second receipt.

``python receipts_celery.py worker --name N``: a worker (solo pool).
``python receipts_celery.py submit --thread T --workdir W [--bug plain]``: makes the table, sends
order ``T``'s task once (a note in ``W`` says it was sent; its id comes from ``T``), waits for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from celery import Celery
from sqlalchemy.dialects import postgresql, sqlite

from killdrill.fakes import connect

app = Celery(
    "receipts_celery",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    backend=os.environ.get("CELERY_RESULT_BACKEND", "redis://127.0.0.1:6379/0"),
)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
)


def receipts(unique: bool) -> sa.Table:
    return sa.Table(
        "receipts",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("order_id", sa.String(80), unique=unique, nullable=False),
        sa.Column("amount", sa.Integer, nullable=False),
        sa.Column("charge_id", sa.String(80), nullable=False),
        sa.Column("created_at", sa.DateTime, server_default=sa.func.now()),
    )


_engine: sa.Engine | None = None


def engine() -> sa.Engine:
    global _engine
    if _engine is None:
        _engine = sa.create_engine(os.environ["DATABASE_URL"])
    return _engine


@app.task
def charge_order(order: str, amount: int, bug: str = "") -> dict[str, Any]:
    charge = connect().payments.charge(idempotency_key=f"order-{order}/charge", amount=amount, customer=order)
    table = receipts(unique=bug != "plain")
    row = {"order_id": order, "amount": amount, "charge_id": charge["id"]}
    with engine().begin() as conn:
        if bug == "plain":
            conn.execute(table.insert().values(**row))
        else:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            conn.execute(dialect.insert(table).values(**row).on_conflict_do_nothing(index_elements=["order_id"]))
    return {"charge": charge["id"]}


def submit(thread: str, workdir: str, bug: str) -> dict[str, Any]:
    receipts(unique=bug != "plain").metadata.create_all(engine())
    task_id = f"charge-{thread}"
    note = Path(workdir) / f"submitted-{thread}"
    if not note.exists():
        charge_order.apply_async(args=(thread, 4200, bug), task_id=task_id)
        note.write_text(task_id)
    result: dict[str, Any] = app.AsyncResult(task_id).get(timeout=120)
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=("worker", "submit"))
    p.add_argument("--name", default="w")
    p.add_argument("--thread")
    p.add_argument("--workdir", default=".")
    p.add_argument("--bug", choices=("plain",), default="")
    args = p.parse_args()
    if args.role == "worker":
        app.worker_main(
            ["worker", "--pool", "solo", "--loglevel", "WARNING", "--hostname", f"{args.name}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat"]
        )  # fmt: skip
        return
    print(json.dumps(submit(args.thread, args.workdir, args.bug)), flush=True)


if __name__ == "__main__":  # the task is registered under the module's name, in worker and submitter
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from receipts_celery import main as module_main

    module_main()
