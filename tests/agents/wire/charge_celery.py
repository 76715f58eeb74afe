"""A Celery task (``acks_late``) that charges over HTTP with ``requests``, and its driver: a
worker forked from this process and a submitter that sends one task and waits for its result.

``python tests/agents/wire/charge_celery.py --thread T --workdir W [--bug unkeyed]``

Nothing here knows killdrill but the fakes' base URL.  The charge is keyed by the order; with
``--bug unkeyed`` it is sent without a key, so a delivery the broker hands on again after a kill
charges twice.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import requests
from celery import Celery

app = Celery(
    "charge_celery",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    backend=os.environ.get("CELERY_RESULT_BACKEND", "redis://127.0.0.1:6379/0"),
)
app.conf.update(broker_connection_retry_on_startup=True, worker_prefetch_multiplier=1)


@app.task(bind=True, acks_late=True)
def charge(self: Any, order: str, bug: str) -> str:
    headers = {} if bug == "unkeyed" else {"Idempotency-Key": f"order-{order}/charge"}
    r = requests.post(
        os.environ["KILLDRILL_FAKES_URL"] + "/fakes/payments/charge",
        json={"amount": 4200, "currency": "usd", "customer": order},
        headers=headers,
        timeout=10,
    )
    r.raise_for_status()
    return str(r.json()["id"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--bug", choices=("unkeyed",), default="")
    args = parser.parse_args()
    pid = os.fork()
    if pid == 0:  # the worker: nothing is connected yet, so it shares no socket with the submitter
        code = 0
        try:
            app.worker_main(["worker", "--pool", "solo", "--loglevel", "WARNING", "--hostname",
                             f"charge-{os.getpid()}@%h", "--without-gossip", "--without-mingle",
                             "--without-heartbeat"])  # fmt: skip
        except BaseException:
            code = 1
        os._exit(code)
    try:
        task_id = f"charge-{args.thread}"
        note = Path(args.workdir) / f"submitted-{args.thread}"
        if not note.exists():
            charge.apply_async(args=(args.thread, args.bug), task_id=task_id)
            note.write_text(task_id)
        print(app.AsyncResult(task_id).get(timeout=120), flush=True)
    finally:
        os.kill(pid, signal.SIGTERM)  # warm: the task in hand is finished and acknowledged
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    sys.exit(0)


if __name__ == "__main__":
    main()
