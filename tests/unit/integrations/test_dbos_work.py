"""Under a drill DBOS's own polls wait for the event they poll for: the recovery queue's first
poll for the startup recovery, a result's poll for the workflow's body to end in this process."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from killdrill.integrations.dbos import work


@pytest.fixture
def drilled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(work, "armed", lambda: True)
    monkeypatch.setattr(work, "_recovered", threading.Event())
    monkeypatch.setattr(work, "_finished", set())


class Queue:
    def __init__(self, name: str) -> None:
        self.name = name


def first_waits(queue: str) -> tuple[float, float]:
    """Seconds of a queue worker's first and second wait (interval 1 s), recovery done at 0.1 s."""
    seen: list[float] = []

    def worker(stop: Any, dbos: Any, q: Queue) -> None:
        for _ in range(2):
            t = time.monotonic()
            stop.wait(timeout=0.5)
            seen.append(time.monotonic() - t)

    threading.Timer(0.1, work.recovered).start()
    work.wrap_queue_worker(worker)(threading.Event(), None, Queue(queue))
    return seen[0], seen[1]


def test_the_recovery_queues_first_poll_is_at_the_recovery_not_an_interval_later(drilled: None) -> None:
    first, second = first_waits(work.INTERNAL_QUEUE)
    assert 0.05 < first < 0.35 and second > 0.45  # then DBOS's own interval again


def test_another_queue_and_an_undrilled_process_keep_dbos_polling(
    drilled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert first_waits("orders")[0] > 0.45
    monkeypatch.setattr(work, "armed", lambda: False)
    assert first_waits(work.INTERNAL_QUEUE)[0] > 0.45


def test_the_first_wait_still_ends_at_stop(drilled: None) -> None:
    stop = threading.Event()
    waiter = work._FirstPollAtRecovery(stop)
    threading.Timer(0.1, stop.set).start()
    t = time.monotonic()
    assert waiter.wait(5.0) is True and time.monotonic() - t < 1.0


class NoResult:
    pass


class SysDb:
    """A system database whose workflow's result is recorded ``lag`` s after its body ends."""

    def __init__(self, lag: float) -> None:
        self.done_at: float | None = None
        self.lag = lag
        self.checks = 0

    def check_workflow_result(self, workflow_id: str, **kw: Any) -> Any:
        self.checks += 1
        if self.done_at is not None and time.monotonic() >= self.done_at + self.lag:
            return "receipt"
        return NoResult()

    def await_workflow_result(self, workflow_id: str, polling_interval: float, **kw: Any) -> Any:
        while not isinstance(result := self.check_workflow_result(workflow_id), str):
            time.sleep(polling_interval)
        return result


def test_a_result_is_read_when_the_body_ends_here_not_at_the_next_poll(drilled: None) -> None:
    db = SysDb(lag=0.03)

    def body() -> None:
        with work.working("wf-1", "payout"):
            time.sleep(0.2)
            db.done_at = time.monotonic()

    threading.Thread(target=body).start()
    t = time.monotonic()
    got = work.wrap_await_result(SysDb.await_workflow_result, NoResult)(db, "wf-1", 5.0)
    assert got == "receipt" and time.monotonic() - t < 1.0  # DBOS's own poll: 5 s


def test_a_result_from_another_process_waits_the_agents_interval(drilled: None) -> None:
    db = SysDb(lag=0.0)
    threading.Timer(0.1, lambda: setattr(db, "done_at", time.monotonic())).start()
    t = time.monotonic()
    assert work.wrap_await_result(SysDb.await_workflow_result, NoResult)(db, "wf-2", 0.4) == "receipt"
    assert 0.35 < time.monotonic() - t < 1.5 and db.checks == 2  # no body here: the interval, as DBOS
