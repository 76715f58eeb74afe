"""A user's own MCP server, written with the ``mcp`` SDK's ``MCPServer``: a hotel booking tool.

``python -m killdrill.examples.booking_mcp_server --db PATH [--dedupe]``

``book`` writes a booking row and answers its number.  By default it dedupes nothing (the
planted bug: a client that lost the answer and calls again books the room twice).  With
``--dedupe`` a ``request_id`` it has seen answers the stored booking instead, the receiver side of
an idempotency key.  Nothing here knows about killdrill: drilled behind the counting proxy.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer


def make_server(db_path: str, *, dedupe: bool) -> MCPServer:
    db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    db.execute(
        "CREATE TABLE IF NOT EXISTS bookings (number INTEGER PRIMARY KEY AUTOINCREMENT,"
        " guest TEXT, room TEXT, night TEXT, request_id TEXT)"
    )
    server = MCPServer("hotel")

    @server.tool()
    def book(guest: str, room: str, night: str, request_id: str | None = None) -> dict[str, Any]:
        """Book ``room`` for ``guest`` on ``night``; ``request_id`` names the request."""
        if dedupe and request_id is not None:
            row = db.execute(
                "SELECT number, guest, room, night FROM bookings WHERE request_id = ?", (request_id,)
            ).fetchone()
            if row is not None:
                return {"booking": row[0], "guest": row[1], "room": row[2], "night": row[3]}
        cur = db.execute(
            "INSERT INTO bookings (guest, room, night, request_id) VALUES (?, ?, ?, ?)",
            (guest, room, night, request_id),
        )
        return {"booking": cur.lastrowid, "guest": guest, "room": room, "night": night}

    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.booking_mcp_server")
    parser.add_argument("--db", required=True, help="the hotel's database (SQLite file)")
    parser.add_argument("--dedupe", action="store_true", help="answer a repeated request_id from the record")
    args = parser.parse_args(argv)
    make_server(args.db, dedupe=args.dedupe).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
