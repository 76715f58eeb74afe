"""Shared by the wire-fake tests: a served ledger and a request held in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from killdrill.ledger import Ledger

THREAD = "t"


def outcomes(ledger_file: str, provider: str) -> list[str]:
    return [c.outcome for c in Ledger(ledger_file, THREAD).calls(provider)]


def while_in_flight(
    ledger_file: str, provider: str, first: Callable[[], Any], second: Callable[[], Any]
) -> Any:
    """Start ``first`` (held by the provider's ``latency``), run ``second`` while its key is in flight."""
    ledger = Ledger(ledger_file, THREAD)
    ledger.configure(provider, latency=1.0)
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(first()))
    worker.start()
    deadline = time.monotonic() + 5
    while not ledger.snapshot().in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        return second()
    finally:
        worker.join(10)
        ledger.configure(provider, latency=0)
        assert done, "the first request never finished"
