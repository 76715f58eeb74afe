"""SIGTERM ends a pytest session as Ctrl-C does.

A CI runner cancels a job with SIGTERM.  Left to Python's default, it kills pytest on the spot
(no summary) or, while a drill runs, the supervisor turns it into ``SystemExit(143)``: the
running test fails and the session goes on starting drills.  While the plugin is configured,
a SIGTERM that nobody else handles raises ``KeyboardInterrupt`` in the main thread, at any
phase (collection's discovery, a test's drill, the summary): pytest stops, prints its summary
and exits as interrupted, and every drill's ``finally`` kills its attempts' trees on the way
out.  The whole process group's SIGTERM (an xdist controller and its workers) arrives once per
process: repeats are ignored so the cleanup the first one started is not interrupted.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

_previous: list[Any] = []


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt("SIGTERM")


def install() -> None:
    """From ``pytest_configure``: SIGTERM as Ctrl-C, unless someone installed their own handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGTERM)
    if current in (signal.SIG_DFL, None):
        _previous.append(current)
        signal.signal(signal.SIGTERM, _terminated)


def uninstall() -> None:
    """From ``pytest_unconfigure``: the handler the process had before (a pytest run inside a
    process, e.g. ``pytest.main``, leaves it as it found it)."""
    if _previous and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _previous.pop() or signal.SIG_DFL)
