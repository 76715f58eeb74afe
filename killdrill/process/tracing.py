"""An attempt's trace: the points its processes passed, counted and timed, in the order they
passed them (a tree's processes each have a connection, read in whatever order the loop finds
them readable; a one-way point carries the time it was passed, on the machine's monotonic clock).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from killdrill.process.attempts import Running
from killdrill.process.control import BoundaryMessage, ProtocolViolation
from killdrill.records import TraceEvent

MAX_POINTS = 1_000_000
"""Points one attempt may pass (10x a 100,000-effect agent's): past it the attempt is killed as
a protocol error.  The trace is held in memory (~200 bytes a point), and one-way points arrive
as fast as a loop can send them."""


def in_sent_order(
    read: Iterable[tuple[Running, BoundaryMessage | ProtocolViolation]],
) -> list[tuple[Running, BoundaryMessage | ProtocolViolation]]:
    """Messages read from connections found readable at once, in the order they were sent:
    one-way points by their own time, the rest as read now; one connection's keep their order
    (an MCP server's one-way ``during:`` point read after the agent's next one would otherwise
    come after it in the trace, and the catalogue's order would depend on the scheduler)."""
    now = time.monotonic()

    def sent(item: tuple[Running, BoundaryMessage | ProtocolViolation]) -> float:
        msg = item[1]
        return min(msg.at, now) if isinstance(msg, BoundaryMessage) and msg.at is not None else now

    return sorted(read, key=sent)  # stable


def is_conn(data: object) -> bool:
    """A selector key's data for a control connection: ``(listener, connection)``."""
    return isinstance(data, tuple) and data[0] is not None and data[1] is not None


def traced(run: Running, msg: BoundaryMessage) -> TraceEvent:
    """Count ``msg``'s point and add it to the trace: at its own time when it was sent one way
    (read late, or after the exit, it still says when the agent passed it)."""
    run.counts[msg.point] += 1
    now = run.elapsed_ms()
    at = now if msg.at is None else min(now, max(0.0, (msg.at - run.started) * 1000.0))
    event = TraceEvent(msg.point, run.counts[msg.point], round(at, 3), msg.conn.peer_pid)
    run.trace.append(event)
    return event


def trace_drained(run: Running, limit: int = MAX_POINTS) -> None:
    """Trace the one-way points ``run``'s connections still hold (up to ``limit`` points)."""
    for msg in run.listener.drain():
        if len(run.trace) >= limit:
            break
        traced(run, msg)
