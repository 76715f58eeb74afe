"""An agent that books two nights through an MCP server it launches, as the MCP SDKs' users do:
``Client(StdioServerParameters(command, args))`` with no ``env``, so the server gets the SDK's
minimal default environment (no ``KILLDRILL_*`` variables).

``python -m tests.agents.mcp.rooms_agent --workdir DIR -- SERVER_CMD...``

Each booking sends a ``request_id`` made from the thread and the night (the same on resume) and
is checkpointed in ``DIR/progress.json`` once its answer arrives; a resume skips what it holds.
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

NIGHTS = ("2026-12-24", "2026-12-25")


async def run(workdir: str, command: list[str]) -> None:
    path = os.path.join(workdir, "progress.json")
    progress: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path) as f:
            progress = json.load(f)
    thread = os.environ.get("KILLDRILL_THREAD", "by-hand")
    async with Client(StdioServerParameters(command=command[0], args=command[1:])) as client:
        for night in NIGHTS:
            if night in progress:
                continue
            args = {"guest": "Ana", "room": "12", "night": night, "request_id": f"{thread}:{night}"}
            result = await client.call_tool("book_room", args)
            if result.is_error:
                raise RuntimeError(f"book_room {night}: {result.content}")
            progress[night] = result.structured_content
            with open(path + ".tmp", "w") as f:
                json.dump(progress, f)
            os.replace(path + ".tmp", path)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.agents.mcp.rooms_agent")
    parser.add_argument("--workdir", default=os.environ.get("KILLDRILL_WORKDIR", "."))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    anyio.run(run, args.workdir, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
