"""The saves of parallel LangGraph tasks wait for the last running task (siblings.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from killdrill.integrations.langgraph.siblings import Siblings


def test_a_save_waits_for_every_running_task_and_then_follows_its_result() -> None:
    order: list[str] = []
    gates = [threading.Event(), threading.Event()]
    with ThreadPoolExecutor(4) as pool:
        siblings = Siblings(pool.submit)
        tasks = [
            siblings.task(lambda g=g, i=i: (g.wait(5), order.append(f"task{i}")), (), {})
            for i, g in enumerate(gates)
        ]
        save = siblings.save(lambda: order.append("save") or "saved", (), {})
        gates[0].set()
        tasks[0].result(5)
        assert not save.done() and order == ["task0"]  # task1 still runs: the save has not started
        gates[1].set()
        assert save.result(5) == "saved"
        assert order == ["task0", "task1", "save"]
        assert siblings.save(lambda: "now", (), {}).result(5) == "now"  # nothing runs: at once


def test_a_failed_save_fails_its_placeholder_and_a_cancelled_task_ends_its_wait() -> None:
    with ThreadPoolExecutor(1) as pool:
        siblings = Siblings(pool.submit)
        gate = threading.Event()
        first = siblings.task(gate.wait, (5,), {})
        queued = siblings.task(lambda: None, (), {})  # one worker: still queued, so cancellable

        def broken() -> None:
            raise OSError("disk full")

        save = siblings.save(broken, (), {})
        assert queued.cancel()
        gate.set()
        first.result(5)
        with pytest.raises(OSError, match="disk full"):
            save.result(5)
