"""The OpenAI Agents SDK probe: ``reserve``, ``charge``, ``notify`` as ``@function_tool``s of one
``Agent``, its run kept in a ``SQLiteSession``, the model the drill's scripted fake.

    python -m killdrill.conform.probes.openai_agents_probe --thread T --workdir DIR

Written as the SDK's docs write agents: ``Runner.run(agent, input, session=SQLiteSession(T, db))``
on the default model API; a session that already holds the request is continued with no new input
(the SDK prepends its items).  The SDK has no idempotency facility of its own: keys are the session
id (the thread) and the tool, what the SDK's own identity of the run gives.  ``--interrupt``: the
``notify`` tool needs a human's approval (``needs_approval=True``) and sends an email
(``mailbox.send``); the run that stops at the approval saves ``result.to_state().to_string()``
(the SDK's documented human-in-the-loop resume), and a process that finds that saved state
approves the call and runs on (``RunState.from_string``, ``state.approve``, ``Runner.run(agent,
state)``), the point ``before:deliver`` marking the start of a delivery, as an approval webhook would.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from agents import Agent, Runner, RunState, SQLiteSession, function_tool

import killdrill
from killdrill.conform.probes._common import parse
from killdrill.fakes import connect


def tools(thread: str, interrupt: bool = False) -> list[Any]:
    fakes = connect()

    @function_tool
    def reserve(customer: str, amount_cents: int) -> str:
        """Hold the amount for the customer."""
        fakes.kv.set(f"hold/{thread}", {"customer": customer, "amount": amount_cents})
        return f"hold/{thread}"

    @function_tool
    def charge(customer: str, amount_cents: int) -> str:
        """Charge the customer."""
        c = fakes.payments.charge(
            idempotency_key=f"{thread}:charge", amount=amount_cents, currency="usd", customer=customer
        )
        return str(c["id"])

    @function_tool
    def notify(charge_id: str) -> str:
        """Tell billing about the charge."""
        posted = fakes.webhooks.post(idempotency_key=f"{thread}:notify", event="charged", charge=charge_id)
        return str(posted["id"])

    @function_tool(name_override="notify", needs_approval=True)
    def notify_by_email(charge_id: str) -> str:
        """Tell billing about the charge (a human approves it first)."""
        sent = fakes.mailbox.send(to="billing@acme.example", subject="Charged", body=f"approved: {charge_id}")
        return str(sent["id"])

    return [reserve, charge, notify_by_email if interrupt else notify]


def _save(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


async def run_interrupt(thread: str, workdir: str) -> str:
    """The human-in-the-loop form: no session; the run's state is the saved ``RunState``."""
    agent = Agent(name="Billing", instructions="Reserve, charge, then notify.", tools=tools(thread, True))
    path, done = os.path.join(workdir, "run_state.json"), os.path.join(workdir, "done")
    if os.path.exists(done):
        return "done"
    if not os.path.exists(path):
        result = await Runner.run(agent, "Charge acme 42.00 USD.")
        if not result.interruptions:
            return str(result.final_output)
        _save(path, result.to_state().to_string())  # parked: waits for a human
    with open(path) as f:
        saved = f.read()
    killdrill.boundary("before:deliver")
    state = await RunState.from_string(agent, saved)
    for item in state.get_interruptions():
        state.approve(item)
    result = await Runner.run(agent, state)
    open(done, "w").close()
    return str(result.final_output)


async def run(thread: str, workdir: str) -> str:
    session = SQLiteSession(thread, os.path.join(workdir, "session.sqlite"))
    items = await session.get_items()
    if items and items[-1].get("role") == "assistant" and items[-1].get("type", "message") == "message":
        return "done"
    agent = Agent(name="Billing", instructions="Reserve, charge, then notify.", tools=tools(thread))
    result = await Runner.run(agent, [] if items else "Charge acme 42.00 USD.", session=session)
    return str(result.final_output)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse("openai_agents_probe", argv)
    if args.interrupt:
        print(asyncio.run(run_interrupt(args.thread, args.workdir)))
    else:
        print(asyncio.run(run(args.thread, args.workdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
