"""A billing agent on the OpenAI Agents SDK whose tools are an MCP server it launches over stdio.

``python -m killdrill.examples.billing_mcp_openai_agents --thread T --db PATH [--bug receipt-ungated]``

``Agent(mcp_servers=[MCPServerStdio(...)])``, a ``SQLiteSession`` per thread, ``Runner.run`` on
the SDK's default model API.  The MCP server is killdrill's counting server
(``python -m killdrill.fakes.mcp``, whose tools are the fakes: ``payments_charge``,
``mailbox_send``, ``mailbox_lookup``); in production it would be the payment and mail
providers' MCP servers.  The model (in a drill, the model fake with
``billing_mcp_openai_agents.yaml``) decides the calls and their arguments: the charge carries an
idempotency key it builds from the order, the receipt a client reference ``receipt-ORDER``.

A kill while a tool call is in flight, or after its answer but before the session's save, loses
the model's call: the resume asks the model again, which calls the tool again.  The keyed
charge replays.  The receipt is irreversible, so the correct form gates it: a tool input
guardrail on the MCP server asks ``mailbox_lookup`` for the reference first and, when the
receipt already went out, answers the model instead of sending it again.

Planted bug (``--bug``):

``receipt-ungated``
    no guardrail: a kill at ``during:mailbox.send`` sends the receipt twice
    (``duplicate_effect`` on ``mailbox.send``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from agents import Agent, Runner, RunResult, SQLiteSession
from agents.mcp import MCPServerStdio, create_static_tool_filter
from agents.tool_guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrailData, tool_input_guardrail

from killdrill.examples.billing_openai_agents import finished

DEFAULT_REQUEST = "Please bill order B-42 for 2500 cents and email the receipt to ana@example.com."
BUGS = ("receipt-ungated",)
INSTRUCTIONS = (
    "You are a billing assistant. Charge the order with payments_charge (idempotency_key: "
    "charge-ORDER), then email the receipt with mailbox_send (ref: receipt-ORDER), then say in one "
    "sentence what you did."
)


def receipt_gate(server: MCPServerStdio) -> Any:
    """The guardrail that reconciles a receipt with the mail provider before sending it."""

    @tool_input_guardrail
    async def gate(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        if data.context.tool_name != "mailbox_send":
            return ToolGuardrailFunctionOutput.allow()
        ref = json.loads(data.context.tool_arguments or "{}").get("ref")
        if ref:
            found = await server.call_tool("mailbox_lookup", {"ref": ref})
            if not found.is_error and (found.structured_content or {}).get("result") is not None:
                return ToolGuardrailFunctionOutput.reject_content(f"receipt {ref} was already sent")
        return ToolGuardrailFunctionOutput.allow()

    return gate


async def main(thread: str, db: str, request: str, bug: str | None) -> str:
    session = SQLiteSession(thread, db)
    items = await session.get_items()
    done = finished(items)
    if done is not None:
        return done
    server = MCPServerStdio(
        # no "env": the SDK starts the server with its minimal default environment, and the
        # counting server finds the drill in this process's (killdrill.fakes.locate)
        {"command": sys.executable, "args": ["-m", "killdrill.fakes.mcp"]},
        name="billing-providers",
        cache_tools_list=True,
        client_session_timeout_seconds=30,
        tool_filter=create_static_tool_filter(allowed_tool_names=["payments_charge", "mailbox_send"]),
    )
    if bug != "receipt-ungated":
        server.tool_input_guardrails = [receipt_gate(server)]
    async with server:
        agent = Agent(name="Billing", instructions=INSTRUCTIONS, mcp_servers=[server])
        # A session that holds the request is resumed with no new input: the SDK prepends its items.
        result: RunResult = await Runner.run(agent, [] if items else request, session=session)
    return str(result.final_output)


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.billing_mcp_openai_agents")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--db", required=True, help="the SQLiteSession file")
    parser.add_argument("--bug", choices=BUGS, help="a planted bug (see the module's docstring)")
    parser.add_argument("--request", default=DEFAULT_REQUEST)
    args = parser.parse_args(argv)
    print(asyncio.run(main(args.thread, args.db, args.request, args.bug)))
    return 0


if __name__ == "__main__":
    sys.exit(run())
