"""A user's MCP server that books rooms, written as users write one with the ``mcp`` SDK 2.x
(``MCPServer``, a SQLite table): ``book_room`` takes a ``request_id`` and dedupes by it.

``python -m tests.agents.mcp.rooms_server --db PATH [--bug second-booking]``

A repeated ``request_id`` answers the booking it made, with ``"replayed": true`` and the time it
answered (``served_at``), as deduping APIs do: the answer is not the first one byte for byte,
the booking is the same.  ``--bug second-booking`` stores the request id but never looks it up:
a repeated request books the room a second time.  Nothing here knows about killdrill.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from datetime import datetime, timezone
from typing import Any

from mcp.server.mcpserver import MCPServer


def make_server(db_path: str, *, bug: str | None) -> MCPServer:
    db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    db.execute(
        "CREATE TABLE IF NOT EXISTS bookings (booking_id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " guest TEXT, room TEXT, night TEXT, request_id TEXT)"
    )
    server = MCPServer("rooms")

    @server.tool()
    def book_room(guest: str, room: str, night: str, request_id: str) -> dict[str, Any]:
        """Book ``room`` for ``guest`` on ``night``; a repeated ``request_id`` answers its booking."""
        served_at = datetime.now(timezone.utc).isoformat()
        if bug != "second-booking":
            row = db.execute("SELECT booking_id FROM bookings WHERE request_id = ?", (request_id,)).fetchone()
            if row is not None:
                return {"booking_id": f"bk_{row[0]}", "room": room, "night": night, "replayed": True,
                        "served_at": served_at}  # fmt: skip
        cur = db.execute(
            "INSERT INTO bookings (guest, room, night, request_id) VALUES (?, ?, ?, ?)",
            (guest, room, night, request_id),
        )
        return {"booking_id": f"bk_{cur.lastrowid}", "room": room, "night": night, "replayed": False,
                "served_at": served_at}  # fmt: skip

    return server


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.agents.mcp.rooms_server")
    parser.add_argument("--db", required=True)
    parser.add_argument("--bug", choices=["second-booking"])
    args = parser.parse_args()
    make_server(args.db, bug=args.bug).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
