"""Worker processes for ``killdrill chaos --processes N`` that never outlive an interruption.

Each worker is a plain ``python -m killdrill.chaos.pool FD PARENT`` subprocess talking
pickles over a private socketpair: no ``multiprocessing`` pool, so no resource-tracker
process and no queue that keeps feeding cases after a signal.  A worker runs in its own
process group (the terminal's Ctrl-C reaches the harness only, which then stops every
worker itself), dies with the harness (``PR_SET_PDEATHSIG``: a SIGKILLed harness takes its
workers along), and on SIGTERM/SIGINT kills every attempt it runs (``interrupt_all``) and
leaves at once with ``os._exit`` (not an exception: a library's cleanup could swallow one).
:meth:`WorkerPool.stop` sends SIGTERM to every worker, waits a bounded grace, then SIGKILLs
what is left.

:func:`interruptible` is the matching main-process half: SIGINT and SIGTERM become
:class:`Interrupted`, raised where the harness is, so every ``finally`` runs.  Both are
reusable by any harness that runs cases in worker processes.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from typing import Any

from killdrill.chaos.case import chaos_case
from killdrill.drill import Drill, DrillOptions
from killdrill.errors import HarnessError
from killdrill.process.containment import PR_SET_PDEATHSIG, prctl
from killdrill.process.interrupts import Interrupted, last_signal, signals_raise
from killdrill.process.supervisor import clear_interrupt, interrupt_all
from killdrill.records import Discovery

__all__ = ["Interrupted", "WorkerPool", "as_interrupted", "interruptible"]


def as_interrupted(exc: BaseException) -> Interrupted | None:
    """``exc`` as the job's interruption: ours, or a supervisor's that ours caused (when a
    library swallowed ours, the supervisor loop raises its own at its next step)."""
    return exc if isinstance(exc, Interrupted) else None


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While inside, SIGINT and SIGTERM kill every attempt of this process (even if a library
    swallows the exception), then raise :class:`Interrupted` in the main thread (elsewhere: a
    no-op); on exit the previous handlers come back and attempts may start again."""
    with signals_raise(on_signal=interrupt_all):
        try:
            yield
        finally:
            if last_signal() is not None:
                clear_interrupt()


class WorkerError(HarnessError):
    """A chaos worker process died or broke its protocol: the job cannot go on (exit 2, one line)."""


class _Worker:
    def __init__(self, popen: subprocess.Popen[bytes], conn: Connection) -> None:
        self.popen = popen
        self.conn = conn
        self.task: int | None = None  # index of the run in flight


class WorkerPool:
    """``n`` worker processes, each with its own Drill over the parent's discovery."""

    def __init__(
        self, n: int, command: Sequence[str], drill_options: DrillOptions, discovery: dict[str, Any]
    ) -> None:
        self.workers: list[_Worker] = []
        try:
            for _ in range(n):
                self.workers.append(self._start((tuple(command), drill_options, discovery)))
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _start(init: tuple[Any, ...]) -> _Worker:
        mine, theirs = socket.socketpair()
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "killdrill.chaos.pool", str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the harness, which stops the workers
            )
        finally:
            theirs.close()
        conn = Connection(mine.detach())
        worker = _Worker(popen, conn)
        conn.send(init)
        return worker

    @property
    def idle(self) -> list[_Worker]:
        return [w for w in self.workers if w.task is None]

    @property
    def busy(self) -> int:
        return sum(w.task is not None for w in self.workers)

    def submit(self, index: int, schedule: str, seed: int) -> None:
        worker = self.idle[0]
        worker.task = index
        worker.conn.send((index, schedule, seed))

    def results(self, timeout: float | None = None) -> list[tuple[int, dict[str, Any], float]]:
        """Wait for at least one run in flight to finish (or ``timeout``); return what finished."""
        busy = {w.conn: w for w in self.workers if w.task is not None}
        out = []
        for conn in wait(list(busy), timeout):
            worker = busy[conn]  # type: ignore[index]  # wait() returns the Connections it was given
            try:
                msg = worker.conn.recv()
            except (EOFError, OSError):
                code = worker.popen.poll()
                raise WorkerError(
                    f"chaos worker {worker.popen.pid} died (exit status {code}) during run {worker.task}"
                ) from None
            worker.task = None
            if msg[0] == "error":
                raise msg[2]
            out.append(msg[1:])
        return out

    def close(self) -> None:
        """Normal end: ask every worker to exit, then make sure they did."""
        for w in self.workers:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        self.stop(grace_s=5.0, signum=None)

    def stop(self, grace_s: float = 0.8, signum: int | None = signal.SIGTERM) -> None:
        """Stop every worker: ``signum`` (each unwinds and kills its attempt), at most ``grace_s``
        to do so, then SIGKILL; every worker is reaped before this returns."""
        if signum is not None:
            for w in self.workers:
                if w.popen.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(w.popen.pid, signum)
        deadline = time.monotonic() + grace_s
        while any(w.popen.poll() is None for w in self.workers) and time.monotonic() < deadline:
            time.sleep(0.01)
        for w in self.workers:
            if w.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.popen.pid, signal.SIGKILL)
                w.popen.wait()
            with contextlib.suppress(OSError):
                w.conn.close()
        self.workers = []


# ---- the worker process ------------------------------------------------------------------
def _stop(signum: int, frame: object) -> None:
    """Kill every attempt of this worker, then leave at once.

    Not an exception: one raised at an arbitrary bytecode can land in a library's cleanup that
    swallows it (SQLAlchemy closing a connection logs and goes on).  The interpreter's teardown
    and a fork template's graceful exit are skipped too: seconds of CPU on a loaded machine.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        interrupt_all()
    finally:
        sys.stderr.flush()
        os._exit(128 + signum)


def _die_with(parent: int) -> None:
    """SIGTERM this process when the harness dies, however it dies (Linux)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the harness died before the line above took effect
        os._exit(143)


def _serve(conn: Connection) -> None:
    command, options, discovery = conn.recv()
    if options.root is not None:
        options = replace(options, root=os.path.join(str(options.root), f"worker-{os.getpid()}"))
    drill = Drill(command, options)
    drill.use_discovery(Discovery.from_dict(discovery))
    while (task := conn.recv()) is not None:
        index, schedule, seed = task
        t0 = time.monotonic()
        try:
            case = chaos_case(drill, schedule, seed=seed)
        except Exception as exc:
            try:
                pickle.dumps(exc)
            except Exception:
                exc = WorkerError(f"{type(exc).__name__}: {exc}")
            conn.send(("error", index, exc))
            continue
        conn.send(("ok", index, case.to_dict(), time.monotonic() - t0))


def main(argv: Sequence[str]) -> int:
    fd, parent = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    _die_with(parent)
    conn = Connection(fd)
    try:
        _serve(conn)
    except (EOFError, OSError):  # the harness went away between runs
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
