"""A drill test's cases run at once inside one pytest process (``workers=N``, ``--killdrill-workers``).

Under ``pytest -n 2`` every xdist worker starts its own interpreter, pytest and plugins, and the
controller waits for them at the end: seconds of fixed cost against a drill of a few seconds.
With ``workers=N`` the first item of a drill test to call ``killdrill.run(COMMAND, kill_point)``
starts its own case and those of its siblings still to run, ``N`` at a time, on the drill it
built; each item then waits for its own case and reports it: its own verdict, its own
reproduction line.  Siblings are the items of the same test function with the same other
parameters, taken from the session's items as selected, so a case ``-k``, ``--lf`` or
``--killdrill-point`` deselected never starts.  A sibling's case is used only if its test asks
for exactly that case (the same command, options and schedule); otherwise its test runs what it
asks, as without ``workers``, and the case started for it is cancelled.  When the session stops
(``-x``, ``--maxfail``, Ctrl-C, its end) the cases not yet started never start and the running
ones are killed.  Under xdist each worker runs its items' cases one at a time (the worker does
not know its next items ahead).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from killdrill.records import CaseResult


def _group(item: pytest.Item) -> tuple[str, str, tuple[tuple[str, int], ...]] | None:
    """The items whose cases start together: one test function, the same other parameters."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "kill_point" not in callspec.params:
        return None
    others = tuple(sorted((k, v) for k, v in callspec.indices.items() if k != "kill_point"))
    parent = item.parent.nodeid if item.parent is not None else ""
    return parent, getattr(item, "originalname", item.name), others


class AheadCases:
    """The session's cases started ahead of their items: one future per item, by node id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, tuple[str, str, Future[CaseResult]]] = {}  # nodeid -> ident, schedule
        self._groups: set[tuple[str, str, tuple[tuple[str, int], ...]]] = set()
        self._pools: list[ThreadPoolExecutor] = []
        self.started: list[str] = []  # the schedules started, in order (the tests read it)

    def start(
        self,
        item: pytest.Item,
        ident: str,
        workers: int,
        cases: Callable[[pytest.Item], str | None],
        run_case: Callable[[str], CaseResult],
    ) -> None:
        """Start ``item``'s case and its siblings' still to run, ``workers`` at a time (once per
        group); ``cases(sibling)`` is the schedule of a sibling's case, or None for none."""
        group = _group(item)
        if group is None:
            return
        with self._lock:
            if group in self._groups:
                return
            self._groups.add(group)
        items: Sequence[pytest.Item] = item.session.items
        try:
            at = items.index(item)
        except ValueError:
            return
        todo: list[tuple[str, str]] = []
        for other in items[at:]:
            if _group(other) != group or other.nodeid in self._futures:
                continue
            schedule = cases(other)
            if schedule is not None:
                todo.append((other.nodeid, schedule))
        if not todo:
            return
        pool = ThreadPoolExecutor(workers, thread_name_prefix="killdrill-case")
        with self._lock:
            self._pools.append(pool)
            for nodeid, schedule in todo:
                self._futures[nodeid] = (ident, schedule, pool.submit(self._one, run_case, schedule))
        pool.shutdown(wait=False)  # its threads end with its last case; stop() may still cancel

    def _one(self, run_case: Callable[[str], CaseResult], schedule: str) -> CaseResult:
        with self._lock:
            self.started.append(schedule)
        return run_case(schedule)

    def take(self, nodeid: str, ident: str, schedule: str) -> Future[CaseResult] | None:
        """The case started for ``nodeid`` if it is this one (``ident``, ``schedule``); one
        started for another call is cancelled, and the call runs its own."""
        with self._lock:
            found = self._futures.pop(nodeid, None)
        if found is None:
            return None
        if (found[0], found[1]) != (ident, schedule):
            found[2].cancel()
            return None
        return found[2]

    def wait(self, future: Future[CaseResult]) -> CaseResult:
        """The case's result (its harness error raised); interrupted, every case stops."""
        try:
            return future.result()
        except Exception:
            raise  # the case's own error (a harness error): the item reports it
        except BaseException:  # Ctrl-C while waiting, or the case was interrupted
            self.stop()
            raise

    def forget(self, nodeid: str) -> None:
        """``nodeid`` ended without asking for its case: if not started, it never starts."""
        with self._lock:
            found = self._futures.pop(nodeid, None)
        if found is not None:
            found[2].cancel()

    def stop(self) -> None:
        """Cases not started never start; running ones are killed; their threads are joined."""
        with self._lock:
            pools, self._pools = self._pools, []
            futures = [f for _, _, f in self._futures.values()]
            self._futures.clear()
        if not pools:
            return  # nothing was started: a session without drills imports nothing more
        from killdrill.process.supervisor import clear_interrupt, interrupt_all

        for f in futures:
            f.cancel()
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        running = [f for f in futures if not f.done()]
        if running:
            interrupt_all()
        try:
            for pool in pools:
                pool.shutdown(wait=True)
        finally:
            if running:
                clear_interrupt()


class ConcurrentHooks:
    """Ends what an item left behind, and everything when the session stops (``-x``, ``--maxfail``)."""

    def __init__(self, ahead: AheadCases) -> None:
        self.ahead = ahead

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, None]:
        yield
        self.ahead.forget(item.nodeid)
        if item.session.shouldfail or item.session.shouldstop or nextitem is None:
            self.ahead.stop()

    def pytest_sessionfinish(self) -> None:
        self.ahead.stop()
