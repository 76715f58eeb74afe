"""An agent that acts through the counting MCP server with the real ``mcp`` client.

``python -m tests.agents.mcp.charge_and_ticket --transport stdio|http [--unkeyed] [--workdir DIR]``

It charges (``payments_charge``) and opens a ticket (``tickets_create``), checkpointing each
answer in ``DIR/progress.json``; a resume skips what the checkpoint holds.
Between the two calls it reaches ``after:charge`` (the charge is checkpointed).  Keyed by the
thread and the action, the calls replay on resume; ``--unkeyed`` sends no key (a duplicate).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import killdrill


async def main(transport: str, unkeyed: bool, workdir: str) -> None:
    thread = os.environ.get("KILLDRILL_THREAD", "by-hand")
    path = os.path.join(workdir, "progress.json")
    progress: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path) as f:
            progress = json.load(f)
    server: Any
    if transport == "stdio":
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "killdrill.fakes.mcp"], env=dict(os.environ)
        )
    else:
        server = os.environ["KILLDRILL_FAKES_URL"] + "/mcp"
    calls = [
        ("charge", "payments_charge", {"amount": 1200, "currency": "usd", "order": "A-1"}),
        ("ticket", "tickets_create", {"title": "ship A-1"}),
    ]
    async with Client(server) as client:
        for step, tool, args in calls:
            if step in progress:
                continue
            if not unkeyed:
                args = {**args, "idempotency_key": f"{thread}:{step}"}
            result = await client.call_tool(tool, args)
            if result.is_error:
                raise SystemExit(f"{tool}: {result.structured_content}")
            progress[step] = result.structured_content
            with open(path + ".tmp", "w") as f:
                json.dump(progress, f)
            os.replace(path + ".tmp", path)
            killdrill.boundary(f"after:{step}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--unkeyed", action="store_true")
    parser.add_argument("--workdir", default=os.environ.get("KILLDRILL_WORKDIR", "."))
    a = parser.parse_args()
    anyio.run(main, a.transport, a.unkeyed, a.workdir)
