"""The bundled example: a five-node settlement agent, exactly-once under any kill.

    python -m killdrill.examples.settlement --thread T --db PATH [--account acme] [--bug NAME]

Nodes, in order: ``read_usage`` -> ``decide_amount`` -> ``charge_customer`` ->
``write_invoice`` -> ``send_receipt``.  Each runs inside ``killdrill.node(name)``
(``before:``/``after:`` points); its output is committed to the SQLite checkpoint at
``--db``, then ``committed:NAME`` is announced.  On start the agent resumes from the
thread's checkpoint: completed nodes are never re-run, the input is never re-submitted.

The correct form (no ``--bug``) is exactly-once under any kill, random millisecond offsets
included: keys come from what the action is (thread, node, account, billing cycle) via
:func:`killdrill.effects.idempotency_key`; the amount is the checkpointed output of
``decide_amount``; the charge and the counter go through :func:`durable_effect` with the
key forwarded to the provider; the invoice is a ``kv.set`` (converges) plus a keyed counter
increment; the receipt is the last step, behind :func:`gate`, which reconciles a claim left
in flight by a killed attempt with ``mailbox.lookup(ref)``.  The effect store lives in the
same SQLite file as the checkpoint.

``--bug NAME`` plants exactly one defect, and the violation a drill should report:

- ``uuid_key``: the charge key is a fresh uuid4 per attempt -> ``key_changed`` and
  ``duplicate_effect`` (a second charge under a new key) when the kill lands after the
  charge and before the checkpoint (``during:payments.charge``, ``after:charge_customer``).
- ``clock_key``: the charge key is built from the clock -> ``key_changed`` and
  ``duplicate_effect``, same points.
- ``no_key``: the charge is sent without a key -> ``duplicate_effect``, same points.
- ``recomputed_amount``: charge_customer re-reads the live meter (late usage arrives between
  attempts) instead of taking the checkpointed amount; the stable key is reused with another
  amount -> ``key_reused`` (the provider refuses it, so the run cannot finish: also
  ``resume_failed`` and ``missing_effect``), same points.
- ``ungated_email``: the receipt is sent directly, no gate -> ``duplicate_effect`` at
  ``during:mailbox.send`` and ``after:send_receipt``.
- ``counter_no_key``: the invoice counter is incremented without a key -> ``duplicate_effect``
  at ``during:counter.increment`` and ``after:write_invoice``.
- ``resubmit_input``: every start re-submits the input and restarts at ``read_usage``.  The
  stable keys and the gate absorb the re-run, so no effect lands twice: the drill reports it
  as ``resumed_from_start`` (the classic mistake, flagged on its own), not as an effect
  violation.  Combined with any real key bug it would double every effect.

Exit 0 when the settlement completed (also when it was already complete).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import killdrill
from killdrill.effects import ResultStore, durable_effect, gate, idempotency_key

NODES = ("read_usage", "decide_amount", "charge_customer", "write_invoice", "send_receipt")
BUGS = (
    "uuid_key",
    "clock_key",
    "no_key",
    "recomputed_amount",
    "ungated_email",
    "counter_no_key",
    "resubmit_input",
)
DEFAULT_CYCLE = "2024-06"
RATE_CENTS = 12  # per unit of usage


class Checkpoint:
    """Per-thread node outputs in SQLite; each node's output is committed on its own."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS settlement_runs (thread TEXT PRIMARY KEY, input TEXT NOT NULL)"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS settlement_outputs ("
            " thread TEXT NOT NULL, node TEXT NOT NULL, output TEXT NOT NULL, PRIMARY KEY (thread, node))"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS settlement_meter (account TEXT NOT NULL, cycle TEXT NOT NULL,"
            " reads INTEGER NOT NULL, PRIMARY KEY (account, cycle))"
        )

    def start(self, thread: str, inputs: dict[str, Any], *, resubmit: bool) -> dict[str, Any]:
        """The thread's input: the stored one on resume, unless the input is (wrongly) re-submitted."""
        if resubmit:
            with self.conn:
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.execute("DELETE FROM settlement_outputs WHERE thread = ?", (thread,))
                self.conn.execute(
                    "INSERT OR REPLACE INTO settlement_runs VALUES (?, ?)", (thread, json.dumps(inputs))
                )
            return inputs
        self.conn.execute("INSERT OR IGNORE INTO settlement_runs VALUES (?, ?)", (thread, json.dumps(inputs)))
        row = self.conn.execute("SELECT input FROM settlement_runs WHERE thread = ?", (thread,)).fetchone()
        return dict(json.loads(row[0]))

    def outputs(self, thread: str) -> dict[str, Any]:
        rows = self.conn.execute("SELECT node, output FROM settlement_outputs WHERE thread = ?", (thread,))
        return {node: json.loads(out) for node, out in rows}

    def commit(self, thread: str, node: str, output: Any) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO settlement_outputs VALUES (?, ?, ?)", (thread, node, json.dumps(output))
        )

    def read_meter(self, account: str, cycle: str) -> int:
        """The live meter: every read sees late usage that arrived since the last one."""
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(
                "INSERT INTO settlement_meter VALUES (?, ?, 1) ON CONFLICT (account, cycle)"
                " DO UPDATE SET reads = reads + 1",
                (account, cycle),
            )
            reads = self.conn.execute(
                "SELECT reads FROM settlement_meter WHERE account = ? AND cycle = ?", (account, cycle)
            ).fetchone()[0]
        return base_units(account, cycle) + int(reads)


def base_units(account: str, cycle: str) -> int:
    """Usage of an account in a billing cycle: deterministic, no clock, no randomness."""
    return 100 + int(hashlib.sha256(f"{account}|{cycle}".encode()).hexdigest()[:6], 16) % 900


class Settlement:
    def __init__(self, thread: str, db: str, inputs: dict[str, Any], bug: str | None) -> None:
        from killdrill.fakes import connect

        self.thread = thread
        self.bug = bug
        self.ckpt = Checkpoint(db)
        self.inputs = self.ckpt.start(thread, inputs, resubmit=bug == "resubmit_input")
        self.account: str = self.inputs["account"]
        self.cycle: str = self.inputs["cycle"]
        self.store = ResultStore(db)
        self.fakes = connect(thread=thread)
        self.state = self.ckpt.outputs(thread)

    def key(self, node: str) -> str:
        return idempotency_key(self.thread, node, 0, {"account": self.account, "cycle": self.cycle})

    # -- nodes ---------------------------------------------------------------

    def read_usage(self) -> dict[str, Any]:
        return {"account": self.account, "cycle": self.cycle, "units": base_units(self.account, self.cycle)}

    def decide_amount(self) -> dict[str, Any]:
        units = int(self.state["read_usage"]["units"])
        return {"amount": units * RATE_CENTS, "currency": "usd"}

    def charge_customer(self) -> dict[str, Any]:
        amount = int(self.state["decide_amount"]["amount"])
        if self.bug == "recomputed_amount":
            amount = self.ckpt.read_meter(self.account, self.cycle) * RATE_CENTS
        payload = {
            "amount": amount,
            "currency": self.state["decide_amount"]["currency"],
            "customer": self.account,
            "description": f"usage {self.cycle}",
        }
        payments = self.fakes.payments
        if self.bug in ("uuid_key", "clock_key", "no_key", "recomputed_amount"):
            key: str | None = {
                "uuid_key": f"charge-{uuid.uuid4()}",
                "clock_key": f"charge-{self.account}-{time.time_ns()}",
                "no_key": None,
                "recomputed_amount": self.key("charge_customer"),
            }[self.bug]
            charge = payments.charge(idempotency_key=key, **payload)
        else:
            key = self.key("charge_customer")
            charge = durable_effect(
                self.store,
                key,
                lambda: payments.charge(idempotency_key=key, **payload),
                provider_honours_keys=True,
                thread=self.thread,
                node="charge_customer",
                occurrence=0,
                payload=payload,
                wait_s=30,
            )
        return {"charge_id": charge["id"], "amount": amount}

    def write_invoice(self) -> dict[str, Any]:
        charge = self.state["charge_customer"]
        invoice_id = f"inv-{self.account}-{self.cycle}"
        self.fakes.kv.set(
            f"invoice:{invoice_id}",
            {
                "account": self.account,
                "cycle": self.cycle,
                "amount": charge["amount"],
                "charge": charge["charge_id"],
            },
        )
        counter = self.fakes.counter
        if self.bug == "counter_no_key":
            counter.increment("invoices_issued")
        else:
            key = self.key("write_invoice")
            durable_effect(
                self.store,
                key,
                lambda: counter.increment("invoices_issued", idempotency_key=key),
                provider_honours_keys=True,
                thread=self.thread,
                node="write_invoice",
                occurrence=0,
                payload={"counter": "invoices_issued", "by": 1},
                wait_s=30,
            )
        return {"invoice_id": invoice_id}

    def send_receipt(self) -> dict[str, Any]:
        ref = self.key("send_receipt")
        amount = int(self.state["charge_customer"]["amount"])
        message = {
            "to": f"billing@{self.account}.example",
            "subject": f"Receipt {self.state['write_invoice']['invoice_id']}",
            "body": f"We charged {amount / 100:.2f} USD for your usage in {self.cycle}.",
        }
        mailbox = self.fakes.mailbox
        if self.bug == "ungated_email":
            sent = mailbox.send(**message, ref=ref)
        else:
            sent = gate(
                self.store,
                ref,
                lambda: mailbox.send(**message, ref=ref),
                reconcile=mailbox.lookup,
                thread=self.thread,
                node="send_receipt",
                occurrence=0,
                payload=message,
                wait_s=30,
            )
        return {"message_id": sent["id"], "ref": ref}

    # -- the loop ------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        steps: dict[str, Callable[[], dict[str, Any]]] = {n: getattr(self, n) for n in NODES}
        for name in NODES:
            if name in self.state:
                continue  # completed by an earlier attempt: never re-run
            with killdrill.node(name):
                output = steps[name]()
            self.ckpt.commit(self.thread, name, output)
            self.state[name] = output
            killdrill.boundary(f"committed:{name}")
        return self.state


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m killdrill.examples.settlement", description="killdrill's example settlement agent"
    )
    parser.add_argument("--thread", required=True, help="thread id: the same on every attempt")
    parser.add_argument("--db", required=True, help="SQLite checkpoint file (also holds the effect store)")
    parser.add_argument("--account", default="acme")
    parser.add_argument("--cycle", default=DEFAULT_CYCLE, help="billing cycle, e.g. 2024-06")
    parser.add_argument("--bug", choices=BUGS, help="plant one defect (see the module docstring)")
    args = parser.parse_args(argv)
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    agent = Settlement(args.thread, args.db, {"account": args.account, "cycle": args.cycle}, args.bug)
    state = agent.run()
    print(
        json.dumps(
            {"thread": args.thread, "settled": state["charge_customer"], "receipt": state["send_receipt"]}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
