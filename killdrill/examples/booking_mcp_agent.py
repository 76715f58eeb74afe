"""An agent that books through an MCP server it launches over stdio (the ``mcp`` SDK's client).

``python -m killdrill.examples.booking_mcp_agent --workdir DIR [--keyed] -- SERVER_CMD...``

It books two nights for a guest, one ``tools/call`` of ``book`` each, and checkpoints each
booking in ``DIR/progress.json`` after its answer arrives; a resumed run skips what the
checkpoint holds.  The gap between the server's write and the checkpoint is where a kill
lands (``during:hotel.book`` behind the counting proxy): the answer was lost, the resume books
again.  ``--keyed`` sends a ``request_id`` derived from the thread and the night (stable across
attempts), which a server that dedupes answers from its record: exactly once.  The server
command is the user's: drilled, it is the counting proxy in front of
``killdrill.examples.booking_mcp_server``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

NIGHTS = ("2026-12-24", "2026-12-25")


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data: dict[str, Any] = json.load(f)
            return data
    except FileNotFoundError:
        return {}


def _save(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def run(workdir: str, command: Sequence[str], *, keyed: bool) -> None:
    progress_path = os.path.join(workdir, "progress.json")
    progress = _load(progress_path)
    thread = os.environ.get("KILLDRILL_THREAD", "by-hand")
    params = StdioServerParameters(command=command[0], args=list(command[1:]))  # the SDK's default env
    async with Client(params) as client:
        for night in NIGHTS:
            if night in progress:
                continue
            args: dict[str, Any] = {"guest": "Ana", "room": "12", "night": night}
            if keyed:
                args["request_id"] = f"{thread}:book:{night}"
            result = await client.call_tool("book", args)
            if result.is_error:
                raise RuntimeError(f"book {night}: {result.content}")
            progress[night] = result.structured_content
            _save(progress_path, progress)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.booking_mcp_agent")
    parser.add_argument("--workdir", default=os.environ.get("KILLDRILL_WORKDIR", "."))
    parser.add_argument("--keyed", action="store_true", help="send a stable request_id with each booking")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- SERVER_CMD [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the MCP server's command after --")
    anyio.run(lambda: run(args.workdir, command, keyed=args.keyed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
