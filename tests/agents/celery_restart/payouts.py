"""A payout worker on Celery as users write one: the app, its task, a worker, a submitter.  The
broker and the result backend are Redis (``CELERY_BROKER_URL``, ``CELERY_RESULT_BACKEND``).

The task pays the order out once: a charge keyed by the order.  What differs is one line of the
app's configuration, the one a Redis restart tests:

- default (the bug): the task's result is stored once; if Redis is down at that moment the
  storing fails, and Celery records that ConnectionError as the task's result (a FAILURE, though
  the payout was made): the submitter can never learn that its order was paid.
- ``PAYOUTS_RESULT_RETRY=1``: ``result_backend_always_retry=True`` (Celery >= 5.1): the result
  is stored again until Redis is back.

``PAYOUTS_KEY=none`` charges with no key: the bug a task delivered again shows (the broker
restarted before the worker's late ack).

``python payouts.py worker`` / ``python payouts.py submit --order ID --workdir DIR``.
"""

import argparse
import os
import sys
from pathlib import Path

from celery import Celery

from killdrill.fakes import connect

app = Celery(
    "payouts",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    backend=os.environ.get("CELERY_RESULT_BACKEND", "redis://127.0.0.1:6379/1"),
)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)
if os.environ.get("CELERY_BROKER_URL", "").startswith("amqp://"):
    # RabbitMQ as its guide says for messages that must not be lost: a publish returns once the
    # broker has the message on disk (publisher confirms), retried while the broker restarts
    app.conf.update(
        broker_transport_options={"confirm_publish": True},
        task_publish_retry_policy={"max_retries": 40, "interval_start": 0.5, "interval_step": 0.5,
                                   "interval_max": 1.0},
    )  # fmt: skip
if os.environ.get("PAYOUTS_RESULT_RETRY") == "1":
    app.conf.update(result_backend_always_retry=True, result_backend_max_retries=50)


@app.task(name="payouts.pay_out")
def pay_out(order: str, amount: int) -> str:
    if os.environ.get("PAYOUTS_KEY") == "none":  # the bug a redelivered task shows: no key
        charge = connect().payments.charge(amount=amount, customer=order)
    else:
        charge = connect().payments.charge(idempotency_key=f"payout-{order}", amount=amount, customer=order)
    return str(charge["id"])


def submit(order: str, workdir: str) -> None:
    """Send the order's task once (a note in ``workdir`` says so), then wait for its result."""
    note = Path(workdir) / f"sent-{order}"
    if not note.exists():
        pay_out.apply_async((order, 4200), task_id=f"payout-{order}")
        note.write_text("sent")
    print(app.AsyncResult(f"payout-{order}").get(timeout=60), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=("worker", "submit"))
    p.add_argument("--order")
    p.add_argument("--workdir")
    args = p.parse_args()
    if args.role == "worker":
        sys.modules.setdefault("payouts", sys.modules["__main__"])  # the task's module, by name
        app.worker_main(
            ["worker", "--pool", "solo", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
             "--without-heartbeat"]
        )  # fmt: skip
    else:
        submit(args.order, args.workdir)
