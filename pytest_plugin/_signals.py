"""SIGTERM ends a pytest session as Ctrl-C does.

A CI runner cancels a job with SIGTERM.  Left to Python's default, it kills pytest on the spot
(no summary) or, while a drill runs, the supervisor turns it into ``SystemExit(143)``: the
running test fails and the session goes on starting drills.  While the plugin is configured,
a SIGTERM that nobody else handles raises ``KeyboardInterrupt`` in the main thread, at any
phase (collection's discovery, a test's drill, the summary): pytest stops, prints its summary
and exits as interrupted, and every drill's ``finally`` kills its attempts' trees on the way
out.  The whole process group's SIGTERM (an xdist controller and its workers) arrives once per
process: repeats are ignored so the cleanup the first one started is not interrupted.  A SIGTERM
to an xdist controller alone (``kill PID``, ``docker stop``) is passed on to its workers: left
to xdist, a worker busy in a drill finishes its test, then is killed after xdist's 10 s wait,
its drill's folders left to the next run's sweep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any

_previous: list[Any] = []
_workers: set[int] = set()  # an xdist controller's workers (pids), told of a SIGTERM it gets


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for pid in _workers:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    raise KeyboardInterrupt("SIGTERM")


def forward_to(pid: int | None) -> None:
    """An xdist worker of this controller (its pid): a SIGTERM this process gets, it gets too."""
    if pid is not None:
        _workers.add(pid)


def forget(pid: int | None) -> None:
    """That worker is down."""
    if pid is not None:
        _workers.discard(pid)


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
    _workers.clear()
    if _previous and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _previous.pop() or signal.SIG_DFL)
