"""The OpenAI Agents SDK probe: ``reserve``, ``charge``, ``notify`` as ``@function_tool``s of one
``Agent``, its run kept in a ``SQLiteSession``, the model the drill's scripted fake.

    python -m killdrill.conform.probes.openai_agents_probe --thread T --workdir DIR

Written as the SDK's docs write agents: ``Runner.run(agent, input, session=SQLiteSession(T, db))``
on the default model API; a session that already holds the request is continued with no new input
(the SDK prepends its items).  The SDK has no idempotency facility of its own: keys are the session
id (the thread) and the tool, what the SDK's own identity of the run gives.  No interrupt form yet.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from agents import Agent, Runner, SQLiteSession, function_tool

from killdrill.conform.probes._common import parse
from killdrill.fakes import connect


def tools(thread: str) -> list[Any]:
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

    return [reserve, charge, notify]


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
    print(asyncio.run(run(args.thread, args.workdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
