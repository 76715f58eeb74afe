"""Parallel tasks save their writes once none of them still runs, one save at a time.

A step's tasks (a ``Send`` fan-out, two nodes of one superstep) run on the loop's threads, and
each task's writes are handed to the checkpointer as soon as it returns.  Left alone,
``committed:pay#1`` (the first branch's writes saved) finds the other branches' effects made in
one run and not yet made in the next, by how their latency compares with that save: one kill point
would be two states (the duplicate a resume makes of a branch that charged, or a first charge
on resume), and its reproduction line a coin toss.  So a save submitted while another task of the
run still runs waits, without holding a thread, until the last of them returned; the saves then
run one at a time, each with its ``committed:`` point, and never while another thread's point is
decided (``killdrill.agent.await_decisions``).  ``committed:NODE#N`` is then one state: every task
of the step ran, exactly N of them saved.  Sync loops only (an async loop's tasks share one thread,
which a point stops whole).  Standard library only.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SAVES", "Siblings"]

SAVES = threading.RLock()
"""Held around one task's ``put_writes`` and its ``committed:`` point: no other save lands while
that point is decided (a kill there finds exactly the saves announced before it)."""

Submit = Callable[..., "concurrent.futures.Future[Any]"]


class Siblings:
    """One loop's running tasks and the saves waiting for them to end."""

    def __init__(self, submit: Submit) -> None:
        self._submit = submit
        self._lock = threading.Lock()
        self._running = 0
        self._deferred: list[tuple[concurrent.futures.Future[Any], Any, tuple[Any, ...], dict[str, Any]]] = []

    def task(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Submit a task; count it as running until its future is done (returned, raised or
        cancelled).  The count is dropped before LangGraph's own callback commits the task."""
        fut = self._submit(fn, *args, **kwargs)
        if isinstance(fut, concurrent.futures.Future):
            with self._lock:
                self._running += 1
            fut.add_done_callback(self._ended)
        return fut

    def save(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Submit a ``put_writes`` now, or, while a task still runs, a future that follows it once
        it is submitted after the last one ended."""
        with self._lock:
            if self._running:
                placeholder: concurrent.futures.Future[Any] = concurrent.futures.Future()
                self._deferred.append((placeholder, fn, args, kwargs))
                return placeholder
        return self._submit(fn, *args, **kwargs)

    def _ended(self, _: object) -> None:
        with self._lock:
            self._running -= 1
            if self._running:
                return
            ready, self._deferred = self._deferred, []
        for placeholder, fn, args, kwargs in ready:
            try:
                real = self._submit(fn, *args, **kwargs)
            except BaseException as exc:  # an executor already shut down: the save's own failure
                placeholder.set_exception(exc)
                continue
            real.add_done_callback(functools.partial(_follow, placeholder))


def _follow(placeholder: concurrent.futures.Future[Any], done: concurrent.futures.Future[Any]) -> None:
    if done.cancelled():
        placeholder.cancel()
    elif (exc := done.exception()) is not None:
        placeholder.set_exception(exc)
    else:
        placeholder.set_result(done.result())
