"""A checkout on Celery, written as users write one: a ``tasks.py`` app, a worker, a submitter.

The app (``-A killdrill.examples.checkout_celery``) has one task, ``checkout``, with
``acks_late=True``: it charges the order (``payments.charge``) and posts its receipt (a keyed
``webhooks.post``).  Both keys are derived from what the effect is, the order, so a task the
broker delivers again (a worker killed before its ack) replays both effects instead of doing
them twice.  The broker and result backend come from ``CELERY_BROKER_URL`` /
``CELERY_RESULT_BACKEND`` (a drill sets both per case), else the local Redis.

``python -m killdrill.examples.checkout_celery worker [--name N]``
    a worker, as ``celery -A killdrill.examples.checkout_celery worker -n N@%h`` starts one
    (two replicas need two names: ``--name w{replica}`` under ``--replicas``).
``python -m killdrill.examples.checkout_celery submit --thread T [--bug ...] [--slow S]``
    the submitter: sends ``checkout`` for order ``T`` with task id ``checkout-T`` (once: a
    re-run finds its note in ``--workdir`` and waits for the task it sent), waits for the
    result and prints it.
``python -m killdrill.examples.checkout_celery drive --thread T --workdir W [--bug ...]``
    both in one command: forks a worker, submits, waits, stops the worker (the drill kills the
    whole process group, worker included, and re-runs the command).

``--bug`` plants a mistake common in the field:

``unkeyed``
    the charge sends no idempotency key: a redelivered task charges again.
``delivery-key``
    the charge's key is taken from the delivery (the worker process that got it) instead of the
    order: a redelivery to a restarted worker charges under a new key.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celery import Celery

from killdrill.fakes import connect

BUGS = ("unkeyed", "delivery-key")
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
RESULT_TIMEOUT_S = 120.0

app = Celery(
    "checkout_celery",
    broker=os.environ.get("CELERY_BROKER_URL", LOCAL_REDIS),
    backend=os.environ.get("CELERY_RESULT_BACKEND", LOCAL_REDIS),
)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    task_track_started=False,
)


@app.task(bind=True, acks_late=True)
def checkout(
    self: Any, order: str, amount: int, email: str, bug: str = "", slow_s: float = 0.0
) -> dict[str, Any]:
    fakes = connect()
    time.sleep(slow_s)  # a slow partner API before the charge
    if bug == "unkeyed":
        key: str | None = None
    elif bug == "delivery-key":
        key = f"{self.request.hostname}/{os.getpid()}/{order}"
    else:
        key = f"order-{order}/charge"
    charge = fakes.payments.charge(idempotency_key=key, amount=amount, currency="usd", customer=order)
    receipt = fakes.webhooks.post(
        idempotency_key=f"order-{order}/receipt", to=email, event="order.paid", amount=amount
    )
    return {"charge": charge["id"], "receipt": receipt["id"]}


def submit(thread: str, bug: str, workdir: str | None, slow_s: float = 0.0) -> dict[str, Any]:
    """Send the order's task once (a note in ``workdir`` says it was sent), wait for its result."""
    task_id = f"checkout-{thread}"
    note = Path(workdir or ".") / f"submitted-{thread}"
    if not note.exists():
        checkout.apply_async(args=(thread, 4200, "ada@example.com", bug, slow_s), task_id=task_id)
        note.write_text(task_id)
        print(f"sent {task_id}", file=sys.stderr, flush=True)
    result: dict[str, Any] = app.AsyncResult(task_id).get(timeout=RESULT_TIMEOUT_S)
    return result


def worker_argv(name: str, pool: str = "solo") -> list[str]:
    """A worker as users start one, named ``name``: the solo pool (one process) or prefork (two
    children run the tasks, the parent consumes and acknowledges)."""
    return [
        sys.executable, "-m", "celery", "-A", "killdrill.examples.checkout_celery", "worker",
        "--pool", pool, "--concurrency", "2", "--loglevel", "WARNING", "--hostname", f"{name}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip


def drive(
    thread: str, bug: str, workdir: str | None, slow_s: float = 0.0, pool: str = "solo"
) -> dict[str, Any]:
    """A worker forked from this process (the app is imported once), the submitter, then the
    worker's warm shutdown."""
    pid = os.fork()
    if pid == 0:  # the worker: nothing connected yet, so it shares no socket with the submitter
        code = 0
        try:
            app.worker_main(worker_argv(f"checkout-{os.getpid()}", pool)[5:])
        except BaseException:
            code = 1
        os._exit(code)
    try:
        return submit(thread, bug, workdir, slow_s)
    finally:
        os.kill(pid, signal.SIGTERM)  # warm: the task in hand is finished and acknowledged
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.checkout_celery", description=__doc__)
    parser.add_argument("role", choices=("worker", "submit", "drive"))
    parser.add_argument("--thread", help="the order (and the task's id)")
    parser.add_argument("--workdir", help="where the submitter notes that it sent the task")  # worker: unused
    parser.add_argument("--bug", choices=BUGS, default="", help="plant a common mistake")
    parser.add_argument("--slow", type=float, default=0.0, help="seconds the task waits before its charge")
    parser.add_argument("--pool", choices=("solo", "prefork"), default="solo", help="the worker's pool")
    parser.add_argument("--name", help="the worker's node name (default: checkout-PID)")
    args = parser.parse_args(argv)
    if args.role == "worker":
        app.worker_main(worker_argv(args.name or f"checkout-{os.getpid()}", args.pool)[5:])
        return
    if not args.thread:
        parser.error(f"{args.role} needs --thread")
    if args.role == "submit":
        result = submit(args.thread, args.bug, args.workdir, args.slow)
    else:
        result = drive(args.thread, args.bug, args.workdir, args.slow, args.pool)
    print(json.dumps(result, sort_keys=True), flush=True)


if __name__ == "__main__":  # the worker imports the module by name: its task is registered there
    from killdrill.examples.checkout_celery import main as module_main

    module_main()
