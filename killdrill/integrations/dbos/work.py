"""The workflows a DBOS service still has to run, said on its stderr under a drill
(:mod:`killdrill.integrations._work`): a deployment's case then ends only once a restarted
service finished the workflows it recovered, whenever DBOS's queue gets to them (its next poll,
up to a second after launch), not whenever the driver happens to finish first.

Under a drill, a service's launch also waits (up to ``RECOVERY_WAIT_S``) until the workflows it
recovers have run, before the app can answer a request: which of a recovered workflow and a
client's re-sent request runs first is then always the same (the recovered one, an order
production has whenever recovery is quick), so a case's violations do not depend on that race.

And under a drill the internal queue's worker polls as soon as the startup recovery re-enqueued
this process's pending workflows, not a polling interval after it started (DBOS waits the
interval before its first poll): a recovered workflow runs when the process starts, which is
what DBOS's recovery means, without the interval's wait that is only the poller's bookkeeping.
Likewise a handle's ``get_result`` on a workflow this process runs (a recovered one) returns
once the workflow's body ended here, not at the next tick of its polling interval."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from killdrill.agent import armed
from killdrill.integrations._work import said as services_say
from killdrill.integrations._work import work_line

__all__ = [
    "RECOVERY_WAIT_S",
    "recovered",
    "working",
    "wrap_await_result",
    "wrap_launch",
    "wrap_queue_worker",
]

RECOVERY_WAIT_S = 5.0
"""How long a launch waits for the workflows it recovers (one may wait on a request to the app)."""
_finished: set[str] = set()  # workflows whose body ended in this process
_changed = threading.Condition()
_recovered = threading.Event()  # this process's startup recovery re-enqueued its pending workflows
_SLICE_S = 0.05  # how soon the first wait notices DBOS stopping the worker
INTERNAL_QUEUE = "_dbos_internal_queue"  # dbos._utils.INTERNAL_QUEUE_NAME: where recovery re-enqueues


def recovered() -> None:
    """The startup recovery re-enqueued this process's pending workflows (or had none)."""
    _recovered.set()


class _FirstPollAtRecovery:
    """The stop event a queue worker waits on between polls, whose first wait ends as soon as the
    startup recovery re-enqueued its workflows (or at the interval, or at stop, as DBOS's)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.first = True

    def is_set(self) -> bool:
        return self.stop.is_set()

    def set(self) -> None:
        self.stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        if not self.first:
            return self.stop.wait(timeout)
        self.first = False
        deadline = None if timeout is None else time.monotonic() + timeout
        while not _recovered.is_set():
            left = _SLICE_S if deadline is None else min(_SLICE_S, deadline - time.monotonic())
            if left <= 0:
                return self.stop.is_set()
            if self.stop.wait(left):
                return True
        return self.stop.is_set()


def wrap_queue_worker(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``dbos._queue.queue_worker_thread``: under a drill, the internal queue's worker makes its
    first poll once the startup recovery re-enqueued (:class:`_FirstPollAtRecovery`)."""

    @functools.wraps(orig)
    def queue_worker_thread(stop_event: Any, dbos: Any, queue: Any, *rest: Any, **kw: Any) -> Any:
        if armed() and getattr(queue, "name", None) == INTERNAL_QUEUE:
            stop_event = _FirstPollAtRecovery(stop_event)
        return orig(stop_event, dbos, queue, *rest, **kw)

    return queue_worker_thread


@contextlib.contextmanager
def working(wid: str | None, name: str) -> Iterator[None]:
    """A workflow's body, said pending and then done (either way) on stderr under a drill: a
    deployment's case does not end while a service still runs one (``integrations._work``)."""
    drilled = wid is not None and armed()
    said = drilled and services_say()
    if said:
        work_line("pending", str(wid), name)
    try:
        yield
    finally:
        if said:
            work_line("done", str(wid))
        if drilled:
            with _changed:
                _finished.add(str(wid))
                _changed.notify_all()


def wrap_launch(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``DBOS._launch``: once launched (before the app can answer a request), say the workflows
    this process will run later, the pending ones its recovery re-enqueued and the queued ones."""

    @functools.wraps(orig)
    def launch(dbos: Any, *rest: Any, **kw: Any) -> Any:
        out = orig(dbos, *rest, **kw)
        if armed() and services_say():
            try:
                held = _unfinished(dbos)
            except Exception as exc:  # never break the agent's launch for the drill's bookkeeping
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(f"killdrill: dbos: could not list the workflows to recover: {exc}\n")
                held = []
            for wid, name in held:
                work_line("pending", wid, name)
            deadline = time.monotonic() + RECOVERY_WAIT_S
            with _changed:
                while not {wid for wid, _ in held} <= _finished and time.monotonic() < deadline:
                    _changed.wait(max(0.0, deadline - time.monotonic()))
        return out

    return launch


def _unfinished(dbos: Any) -> list[tuple[str, str]]:
    """(workflow id, name) of the workflows of this version pending on this executor, or queued."""
    import sqlalchemy as sa  # a dependency of dbos, imported by it already
    from dbos._utils import GlobalParams

    table = dbos._sys_db.tables.workflow_status
    mine = sa.and_(table.c.status == "PENDING", table.c.executor_id == GlobalParams.executor_id)
    with dbos._sys_db.engine.begin() as conn:
        rows = conn.execute(
            sa.select(table.c.workflow_uuid, table.c.name).where(
                sa.or_(mine, table.c.status == "ENQUEUED"),
                table.c.application_version == GlobalParams.app_version,
            )
        ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _until_finished(wid: str, timeout: float) -> None:
    """Wait until workflow ``wid``'s body ended in this process, at most ``timeout`` s; once it has
    (its result being recorded), a short slice."""
    deadline = time.monotonic() + timeout
    with _changed:
        if wid in _finished:
            _changed.wait(min(_SLICE_S / 5, timeout))
            return
        while wid not in _finished and (left := deadline - time.monotonic()) > 0:
            _changed.wait(left)


def wrap_await_result(orig: Callable[..., Any], no_result: type) -> Callable[..., Any]:
    """``SystemDatabase.await_workflow_result`` (or its ``_async`` twin): under a drill, between
    its checks it waits until the workflow's body ends in this process (or the agent's polling
    interval, whichever first) instead of sleeping the interval: the same result, read when it
    is there."""
    if inspect.iscoroutinefunction(orig):

        @functools.wraps(orig)
        async def await_async(self: Any, workflow_id: str, polling_interval: float, **kw: Any) -> Any:
            if not armed():
                return await orig(self, workflow_id, polling_interval, **kw)
            while True:
                result = await asyncio.to_thread(self.check_workflow_result, workflow_id, **kw)
                if not isinstance(result, no_result):
                    return result
                await asyncio.to_thread(_until_finished, str(workflow_id), polling_interval)

        return await_async

    @functools.wraps(orig)
    def await_workflow_result(self: Any, workflow_id: str, polling_interval: float, **kw: Any) -> Any:
        if not armed():
            return orig(self, workflow_id, polling_interval, **kw)
        while True:
            result = self.check_workflow_result(workflow_id, **kw)
            if not isinstance(result, no_result):
                return result
            _until_finished(str(workflow_id), polling_interval)

    return await_workflow_result
