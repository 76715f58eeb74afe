"""A DBOS workflow whose step acts through an MCP tool with the MCP SDK's ``Client``: the counting
fakes over stdio (``python -m killdrill.fakes.mcp``) or streamable HTTP
(``$KILLDRILL_FAKES_URL/mcp``), or the hotel's own server behind killdrill's counting proxy.

``python tests/agents/wire/book_dbos_mcp.py --order O --workdir DIR --transport stdio|http|proxy``

The workflow's id is the order; the tool call is keyed by it (a re-run step replays).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import anyio
from dbos import DBOS, DBOSConfig, SetWorkflowID
from mcp import Client
from mcp.client.stdio import StdioServerParameters

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--workdir", required=True)
p.add_argument("--transport", choices=("stdio", "http", "proxy"), required=True)
args = p.parse_args()


def _server() -> Any:
    if args.transport == "http":
        return os.environ["KILLDRILL_FAKES_URL"] + "/mcp"
    command = ["-m", "killdrill.fakes.mcp"]
    if args.transport == "proxy":
        hotel = os.path.join(args.workdir, "hotel.db")
        command += ["--proxy", "hotel", "--key", "book=request_id", "--"]
        command += [sys.executable, "-m", "killdrill.examples.booking_mcp_server", "--db", hotel, "--dedupe"]
    return StdioServerParameters(command=sys.executable, args=command, env=dict(os.environ))


async def _call(order: str) -> Any:
    if args.transport == "proxy":
        tool, arguments = "book", {"guest": "Ana", "room": "12", "night": "2026-12-24", "request_id": order}
    else:
        tool, arguments = "tickets_create", {"title": f"book {order}", "idempotency_key": f"book-{order}"}
    async with Client(_server()) as client:
        result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool}: {result.content}")
    return result.structured_content


@DBOS.step()
def book(order: str) -> Any:
    return anyio.run(_call, order)


@DBOS.workflow()
def booking_workflow(order: str) -> Any:
    return book(order)


config: DBOSConfig = {
    "name": "bookings",
    "system_database_url": f"sqlite:///{os.path.join(args.workdir, 'dbos.sqlite')}",
    "log_level": "WARNING",
}
DBOS(config=config)
DBOS.launch()
try:
    with SetWorkflowID(args.order):
        handle = DBOS.start_workflow(booking_workflow, args.order)
    print("booked", handle.get_result())
finally:
    DBOS.destroy()
