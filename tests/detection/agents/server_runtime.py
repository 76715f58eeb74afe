"""A durable runtime whose server keeps each run by its thread, outside the workdir.

    python server_runtime.py --thread T --workdir W --server DIR [--bug attempt_key]

The shape of a Temporal worker and starter connected to a server the user runs (``temporal
server start-dev`` at an address the drill does not redirect): the server's state (here a SQLite
file in DIR) is shared by every run of the drill and keyed by the thread (the workflow id).  A run
whose thread the server has already closed attaches to it and does nothing, as a starter does on
``WorkflowAlreadyStartedError``.  The server numbers each dispatch of a step (an activity's
attempt) and never runs a step whose result it recorded again.  ``charge`` then ``send_receipt``,
the receipt naming the charge's id; a retried receipt first asks the provider whether it went.

``--bug attempt_key``: the charge's key includes the server's attempt number ("each retry is a new
request"), so a run killed after the provider charged charges again on its next attempt.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import killdrill
from killdrill.agent import in_runtime
from killdrill.fakes import connect

parser = argparse.ArgumentParser()
parser.add_argument("--thread", required=True)
parser.add_argument("--workdir", required=True)
parser.add_argument("--server", required=True, help="the server's folder, shared by every run")
parser.add_argument("--bug", choices=("attempt_key",), default="")
args = parser.parse_args()
thread: str = args.thread

server = sqlite3.connect(str(Path(args.server) / "server.sqlite"), timeout=60, isolation_level=None)
server.execute("CREATE TABLE IF NOT EXISTS runs (run TEXT PRIMARY KEY, closed INTEGER NOT NULL)")
server.execute(
    "CREATE TABLE IF NOT EXISTS steps"
    " (run TEXT, step TEXT, attempts INTEGER NOT NULL, result TEXT, PRIMARY KEY (run, step))"
)


def step(name: str, fn: Callable[[int], Any]) -> Any:
    """Run ``fn(attempt)`` as the server's next attempt of step ``name``, unless it has its result."""
    row = server.execute(
        "SELECT attempts, result FROM steps WHERE run = ? AND step = ?", (thread, name)
    ).fetchone()
    if row is not None and row[1] is not None:
        return json.loads(row[1])
    attempt = (row[0] if row is not None else 0) + 1
    server.execute("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, NULL)", (thread, name, attempt))
    with (
        killdrill.node(name),
        in_runtime(runtime="server", unit="activity", name=name, attempt=attempt, run=thread),
    ):
        out = fn(attempt)
    server.execute("UPDATE steps SET result = ? WHERE run = ? AND step = ?", (json.dumps(out), thread, name))
    killdrill.boundary(f"committed:{name}")
    return out


closed = server.execute("SELECT closed FROM runs WHERE run = ?", (thread,)).fetchone()
if closed is not None and closed[0]:
    print(f"{thread}: already closed", flush=True)  # attached to the finished run: nothing to do
    raise SystemExit(0)
server.execute("INSERT OR IGNORE INTO runs VALUES (?, 0)", (thread,))
fakes = connect()


def charge(attempt: int) -> str:
    key = f"{thread}:charge:{attempt}" if args.bug == "attempt_key" else f"{thread}:charge"  # DEFECT if --bug
    return str(
        fakes.payments.charge(idempotency_key=key, amount=4200, currency="usd", customer="cus_acme")["id"]
    )


def send_receipt(charge_id: str) -> str:
    ref = f"{thread}:receipt"
    sent = fakes.mailbox.lookup(ref)
    if sent is None:
        body = f"We charged 42.00 USD ({charge_id})."
        sent = fakes.mailbox.send(to="billing@acme.example", subject="Your receipt", body=body, ref=ref)
    return str(sent["id"])


charge_id = step("charge", charge)
print(step("send_receipt", lambda _attempt: send_receipt(charge_id)), flush=True)
server.execute("UPDATE runs SET closed = 1 WHERE run = ?", (thread,))
