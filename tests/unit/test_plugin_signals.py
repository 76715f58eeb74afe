"""SIGTERM as Ctrl-C in a pytest process, and an xdist controller passing it on to its workers."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from killdrill.pytest_plugin import _signals


def test_a_sigterm_to_the_controller_reaches_its_workers_and_stops_it_as_ctrl_c() -> None:
    """A worker (here a sleeping child) is told of the controller's SIGTERM; one that is down
    is forgotten (its pid may be another process's next)."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        _signals.forward_to(worker.pid)
        _signals.forward_to(gone.pid)
        _signals.forget(gone.pid)
        _signals.forward_to(None)
        assert _signals._workers == {worker.pid}
        previous = signal.getsignal(signal.SIGTERM)
        try:
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                _signals._terminated(signal.SIGTERM, None)
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # a repeat waits for the cleanup
        finally:
            signal.signal(signal.SIGTERM, previous)
        assert worker.wait(timeout=10) == -signal.SIGTERM
    finally:
        _signals._workers.clear()
        worker.kill()
        worker.wait()
