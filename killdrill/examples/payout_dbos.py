"""A DBOS payout agent, written as a DBOS user writes one: exactly-once under any kill.

    python -m killdrill.examples.payout_dbos --thread T --workdir DIR [--account acme] [--bug NAME]

Drill it with the DBOS integration (the agent imports nothing of killdrill's kill points)::

    killdrill drill --integration dbos -- \\
        python -m killdrill.examples.payout_dbos --thread {thread} --workdir {workdir}

One ``@DBOS.workflow`` ``payout`` (workflow id = ``--thread``), four ``@DBOS.step`` steps in
order: ``quote`` -> ``charge`` -> ``record_invoice`` -> ``send_receipt``.  The DBOS system
database is SQLite under ``--workdir`` (each drill case has its own).  On start the agent
launches DBOS, which recovers the thread's workflow if a killed attempt left it pending (recorded
steps are replayed, not re-run), and then asks for the workflow under the same id: a new
workflow the first time, a wait for the recovered one's result afterwards, the recorded result
once it finished.  Effects go through :mod:`killdrill.fakes`.

The correct form (no ``--bug``):

- the charge key is the workflow id plus the step's name: the same in every attempt, so a
  charge the provider made but DBOS never recorded (a kill after the call) is replayed by the
  provider, not made twice;
- the amount is ``quote``'s recorded output;
- the invoice is a ``kv.set`` (an upsert converges);
- the receipt is its own step, and it asks the mailbox first (``lookup(ref)``): a message a
  killed attempt sent before DBOS recorded the step is not sent again.

``--bug NAME`` plants one defect common in DBOS code, and what a drill reports:

- ``uuid_key``: ``charge`` builds its key from ``uuid4()`` inside the step -> re-run after a kill
  at ``during:payments.charge`` or ``after:charge`` sends a new key: ``key_changed`` and
  ``duplicate_effect``.  (A uuid from a step of its own would be recorded and stable.)
- ``clock_key``: the key is built from the workflow's start time read in the workflow body
  (``datetime.now()``, not recorded: the body re-runs on recovery) -> ``key_changed`` and
  ``duplicate_effect``, same points.
- ``email_then_work``: ``send_receipt`` sends the email and then updates the CRM record
  (``kv.set``) in the same step, no lookup first -> a kill after the send (``during:mailbox.send``,
  ``during:kv.set#2``, ``after:send_receipt``) re-runs the whole step: the email goes twice,
  ``duplicate_effect``.

- ``email_in_body``: the workflow body sends the receipt itself, outside any step -> DBOS re-runs
  the body on recovery, so a kill after the send (``before:update_crm``) sends it again:
  ``duplicate_effect``, cause ``effect_outside_step`` (the calls' runtime context says where
  they ran).

``--app-version V`` pins DBOS's application version.  Without it the version is a hash of the
workflow source, and DBOS recovers only workflows of its own version: an upgrade that changes
``payout`` leaves a killed run's workflow pending forever (a drill with ``--resume-with`` reports
``resume_failed`` naming that cause); pinned, the new code recovers it.

Exit 0 when the payout completed (also when it had completed before).
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

from killdrill.fakes import connect

BUGS = ("uuid_key", "clock_key", "email_then_work", "email_in_body")
DEFAULT_CYCLE = "2024-06"
RATE_CENTS = 12
_bug: str | None = None


def _fakes() -> Any:
    # Connected per call: steps run on DBOS's executor threads.
    return connect()


@DBOS.step()
def quote(account: str, cycle: str) -> int:
    """Pure compute from the account's usage: its result is recorded, so a resume reuses it."""
    usage = sum(ord(c) for c in f"{account}:{cycle}") % 500 + 100
    return usage * RATE_CENTS


@DBOS.step()
def charge(account: str, cycle: str, amount: int, started: str) -> str:
    if _bug == "uuid_key":
        key = f"payout-{uuid.uuid4()}"
    elif _bug == "clock_key":
        key = f"payout-{account}-{started}"
    else:
        key = f"{DBOS.workflow_id}-charge"
    result = _fakes().payments.charge(
        idempotency_key=key, amount=amount, currency="usd", customer=account, description=f"usage {cycle}"
    )
    return str(result["id"])


@DBOS.step()
def record_invoice(account: str, cycle: str, charge_id: str, amount: int) -> None:
    _fakes().kv.set(key=f"invoice/{account}/{cycle}", value={"charge": charge_id, "amount": amount})


@DBOS.step()
def send_receipt(account: str, cycle: str, amount: int) -> None:
    fakes = _fakes()
    ref = f"{DBOS.workflow_id}-receipt"
    body = f"We charged {amount / 100:.2f} USD for {cycle}."
    if _bug == "email_then_work":
        fakes.mailbox.send(to=f"billing@{account}.example", subject=f"Receipt {cycle}", body=body, ref=ref)
        fakes.kv.set(key=f"crm/{account}/last_receipt", value={"cycle": cycle, "amount": amount})
        return
    if fakes.mailbox.lookup(ref) is None:
        fakes.mailbox.send(to=f"billing@{account}.example", subject=f"Receipt {cycle}", body=body, ref=ref)


@DBOS.step()
def update_crm(account: str, cycle: str, amount: int) -> None:
    _fakes().kv.set(key=f"crm/{account}/last_receipt", value={"cycle": cycle, "amount": amount})


@DBOS.workflow()
def payout(account: str, cycle: str) -> dict[str, Any]:
    # The bug clock_key reads the clock here, in the body: not recorded, new on every recovery.
    started = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%f") if _bug == "clock_key" else ""
    amount = quote(account, cycle)
    charge_id = charge(account, cycle, amount, started)
    record_invoice(account, cycle, charge_id, amount)
    if _bug == "email_in_body":  # outside any step: not recorded, sent again on every recovery
        body = f"We charged {amount / 100:.2f} USD for {cycle}."
        ref = f"{DBOS.workflow_id}-receipt"
        _fakes().mailbox.send(to=f"billing@{account}.example", subject=f"Receipt {cycle}", body=body, ref=ref)
    else:
        send_receipt(account, cycle, amount)
    if _bug != "email_then_work":
        update_crm(account, cycle, amount)
    return {"account": account, "cycle": cycle, "amount": amount, "charge": charge_id}


def main(argv: Sequence[str] | None = None) -> int:
    global _bug
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thread", required=True, help="the workflow id")
    parser.add_argument("--workdir", required=True, help="where the DBOS system database lives")
    parser.add_argument("--account", default="acme")
    parser.add_argument("--cycle", default=DEFAULT_CYCLE)
    parser.add_argument("--bug", choices=BUGS)
    parser.add_argument(
        "--app-version", help="pin DBOS's application version (else a hash of the workflow source)"
    )
    args = parser.parse_args(argv)
    _bug = args.bug
    os.makedirs(args.workdir, exist_ok=True)
    config: DBOSConfig = {
        "name": "payout",
        "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
        "log_level": "WARNING",
    }
    if args.app_version:
        config["application_version"] = args.app_version
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's pending workflows of this application version
    try:
        with SetWorkflowID(args.thread):
            handle = DBOS.start_workflow(payout, args.account, args.cycle)
        result = handle.get_result()
        print(f"payout {result['account']} {result['cycle']}: {result['amount']} cents, {result['charge']}")
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
