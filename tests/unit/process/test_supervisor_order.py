"""The messages of connections found readable at once are handled in the order they were sent:
an MCP server's one-way ``during:`` point read in the same round as the agent's next point
(``after:ticket``) comes first in the trace, as it came first in time."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from killdrill.process.control import BoundaryMessage
from killdrill.process.supervisor import Supervisor


def test_one_way_points_of_two_connections_are_handled_by_their_own_time() -> None:
    sup = Supervisor()
    run: Any = SimpleNamespace(listener=None)
    now = time.monotonic()
    agent = SimpleNamespace(read=lambda conn: [BoundaryMessage(conn, "after:ticket", False, now - 0.001)])
    server = SimpleNamespace(
        read=lambda conn: [
            BoundaryMessage(conn, "during:tickets.create", False, now - 0.002),
            BoundaryMessage(conn, "before:reply", True),  # waits: as read, after the one-way ones
        ]
    )
    handled: list[str] = []
    sup._owner = lambda listener: run  # type: ignore[method-assign]
    sup._on_boundary = lambda r, msg: handled.append(msg.point)  # type: ignore[method-assign]
    sup._on_messages([(agent, "agent-conn"), (server, "server-conn")])  # type: ignore[list-item]
    assert handled == ["during:tickets.create", "after:ticket", "before:reply"]
