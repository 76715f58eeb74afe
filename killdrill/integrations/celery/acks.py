"""Where a Celery worker's acknowledgement really reaches the broker, and the Redis transport's
one real window of loss (agent side: patched into kombu when the agent imports it).

``committed:TASK`` fires once kombu's ``Message.ack`` returned: the broker has the ack (Redis:
the pipeline that removes the delivery from ``unacked`` executed; AMQP: the ``basic.ack`` written
to the socket).  Celery's ``Request.acknowledge`` only schedules that call for the event loop's
next turn, so a point there came before the commit it names.

On Redis a worker's main process asks for work with a ``BRPOP`` sent ahead of time: Redis pops
the next message into the reply at once, and kombu records it in ``unacked`` only when the loop
reads that reply.  The point is never held while such a reply may hold a message (a state
production passes through in microseconds: frozen there, a kill loses the popped message): it
waits until the loop read the reply (the message is then in ``unacked``, or there was none) or
the channel closes.  A BRPOP blocked on empty queues is no such state (an idle worker).  The
window itself is a point of its own, ``during:redis.brpop`` (the message popped, not yet
recorded), emitted when the drill asks for it (``settings.POP_WINDOW_ENV``): a kill there loses the
message whatever the task's code does.
"""

from __future__ import annotations

import functools
import os
import select
import threading
from collections.abc import Callable
from typing import Any

from killdrill.agent import boundary
from killdrill.integrations._work import said as services_say
from killdrill.integrations._work import work_line
from killdrill.integrations.celery.settings import POP_WINDOW_ENV

__all__ = [
    "POP_POINT",
    "starting",
    "wrap_ack",
    "wrap_acknowledge",
    "wrap_brpop_read",
    "wrap_close",
    "wrap_deliver",
]

POP_POINT = "during:redis.brpop"
"""Redis popped a message for this worker (``BRPOP`` answered) and kombu has not yet recorded it
in ``unacked``: the one moment a kill loses a message that ``acks_late`` was to keep."""
_MARK = "_killdrill_committed"  # on a kombu Message: the task's point name, set by acknowledge
_PENDING = "_killdrill_pending"  # on a Redis channel: committed points waiting for the BRPOP reply
_REPLY_WAIT_MS = 20  # a reply Redis flushed with the queues' answer is in the socket by then
_reading = threading.local()


def wrap_acknowledge(orig: Callable[..., Any], point_name: Callable[[Any], str]) -> Callable[..., Any]:
    """Celery's ``Request.acknowledge``: name the message's task for the ack kombu makes later
    (at once in a loop without a hub, on the hub's next turn otherwise)."""

    @functools.wraps(orig)
    def acknowledge(self: Any) -> Any:
        message = getattr(self, "_message", None)
        if not self.acknowledged and message is not None:
            message.__dict__[_MARK] = (point_name(self.task), str(getattr(self, "id", "") or ""))
        return orig(self)

    return acknowledge


def _may_pop(channel: Any) -> bool:
    """A BRPOP is pending on ``channel``: may its reply hold a message?  No when every queue it
    waits on is empty and no reply has come: Redis then blocks it (an idle worker, a state
    production holds), and only a message published from now on could be popped into it.  The
    queues are read first: a reply Redis sent before it answered that is in the socket after."""
    try:
        keys = [channel._q_for_pri(q, pri) for pri in channel.priority_steps for q in channel.active_queues]
        with channel.conn_or_acquire() as client:
            if any(client.llen(key) for key in keys):
                return True
        poller = select.poll()
        poller.register(channel._in_poll._sock, select.POLLIN)
        return bool(poller.poll(_REPLY_WAIT_MS))
    except Exception:  # anything unknown: the safe side (the point waits for the reply)
        return True


def starting(task: Any, run: str) -> None:
    """A task's body starts: in a deployment's worker, an ``acks_late`` task is work pending until
    its ack (a task acknowledged on receipt has nothing left to do once its result is stored)."""
    if run and getattr(task, "acks_late", False) and services_say():
        work_line("pending", run, "task")


def _reached(mark: tuple[str, str]) -> None:
    name, run = mark
    boundary(f"committed:{name}")
    if run and services_say():
        work_line("done", run)


def _committed(channel: Any, mark: tuple[str, str]) -> None:
    """``committed:NAME`` now, or once the channel's pending BRPOP reply has been read."""
    if getattr(channel, "_in_poll", None) and _may_pop(channel):
        channel.__dict__.setdefault(_PENDING, []).append(mark)
    else:
        _reached(mark)


def _flush(channel: Any) -> None:
    for mark in channel.__dict__.pop(_PENDING, None) or ():
        _reached(mark)


def wrap_ack(orig: Callable[..., Any]) -> Callable[..., Any]:
    """kombu's ``Message.ack``: returned means the transport handed the ack to the broker."""

    @functools.wraps(orig)
    def ack(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        mark = self.__dict__.pop(_MARK, None)
        if mark is not None:
            _committed(self.channel, mark)
        return out

    return ack


def wrap_brpop_read(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The Redis channel's read of its BRPOP reply: the acks that waited for it are points now."""

    @functools.wraps(orig)
    def _brpop_read(self: Any, **options: Any) -> Any:
        _reading.channel = self
        try:
            return orig(self, **options)
        finally:
            _reading.channel = None
            _flush(self)

    return _brpop_read


def wrap_deliver(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The Redis transport's delivery of a popped message (before kombu records it in
    ``unacked``): :data:`POP_POINT` when it comes from a BRPOP and the drill asked for it."""

    @functools.wraps(orig)
    def _deliver(self: Any, message: Any, queue: Any) -> Any:
        if getattr(_reading, "channel", None) is not None and os.environ.get(POP_WINDOW_ENV) == "1":
            boundary(POP_POINT)
        return orig(self, message, queue)

    return _deliver


def wrap_close(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A Redis channel closing (a warm shutdown): its waiting points are reached first."""

    @functools.wraps(orig)
    def close(self: Any, *args: Any, **kwargs: Any) -> Any:
        _flush(self)
        return orig(self, *args, **kwargs)

    return close
