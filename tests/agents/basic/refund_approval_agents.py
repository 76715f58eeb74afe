"""A refund that a person approves: an OpenAI Agents SDK agent with a ``needs_approval`` tool,
driven by the SDK's documented human-in-the-loop loop.

``python tests/agents/basic/refund_approval_agents.py --thread T --db PATH``

``Agent(tools=[refund])``, ``refund`` declared ``@function_tool(needs_approval=True)``: the run
returns with ``result.interruptions`` until a person approves (``state.approve(item)``) or rejects
it and the run goes on from ``result.to_state()``.  The person here is ``input()``, as in the SDK's
example; under a drill, ``--answer approve`` answers instead (the integration approves, the loop
below never sees the interruption).  ``refund`` charges a negative amount with a key from the
thread and the order.  A ``SQLiteSession`` keeps the conversation; a session that holds the request
is resumed with no new input.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from agents import Agent, Runner, SQLiteSession, function_tool
from killdrill.fakes import connect

REQUEST = "Refund order R-9 for 1500 cents."


def make_agent(thread: str) -> Agent[Any]:
    fakes = connect()

    @function_tool(needs_approval=True)
    def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order.

        Args:
            order_id: The order, e.g. R-9.
            amount_cents: The amount to refund, in cents.
        """
        key = f"{thread}:refund:{order_id}"
        done = fakes.payments.charge(idempotency_key=key, order=order_id, amount=-int(amount_cents))
        return f"refund {done['id']} done"

    return Agent(name="Refunds", instructions="Refund what the user asks, with the tool.", tools=[refund])


async def main(thread: str, db: str) -> str:
    session = SQLiteSession(thread, db)
    agent = make_agent(thread)
    items = await session.get_items()
    if items and isinstance(items[-1], dict) and items[-1].get("role") == "assistant":
        return "already done"
    result = await Runner.run(agent, [] if items else REQUEST, session=session)
    while result.interruptions:
        state = result.to_state()
        for interruption in result.interruptions:
            answer = input(f"Approve {interruption.name}({interruption.arguments})? [y/n] ")
            if answer.strip().lower() == "y":
                state.approve(interruption)
            else:
                state.reject(interruption)
        result = await Runner.run(agent, state, session=session)
    return str(result.final_output)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--thread", required=True)
    p.add_argument("--db", required=True)
    args = p.parse_args()
    print(asyncio.run(main(args.thread, args.db)))
    sys.exit(0)
