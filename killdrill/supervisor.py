"""The supervisor: launch attempts, trace their boundaries, kill whole process trees.

One attempt (or several at once, for concurrent resumers) is driven by a single-threaded
event loop over a selector: control-channel sockets, the processes' exit (a pidfd where
the kernel has it) and timers (offset kills, delayed kills, holds, the per-attempt
timeout).  No thread races decide where a kill lands: a named kill is decided while the
agent is blocked at the boundary waiting for our answer.

Killing is of the whole tree: the process group is frozen (SIGSTOP) so nothing forks
away while we look, descendants that left the group are found with psutil, everything
gets SIGKILL.  Children also die if the harness itself is SIGKILLed
(``PR_SET_PDEATHSIG``), and every process an attempt started carries the attempt's
token in its environment, so a final sweep finds even daemonized escapees.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import heapq
import itertools
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from killdrill.control import BoundaryMessage, Connection, ControlListener, ProtocolError
from killdrill.points import Kill
from killdrill.records import (
    DRAINED,
    EXITED,
    HARNESS_FAILED,
    KILLED,
    NOT_REACHED,
    TIMED_OUT,
    Attempt,
    TraceEvent,
)

DRAINED_EXIT_CODE = 75
"""Exit status an agent uses to say "I drained on SIGTERM, my checkpoint is committed"."""

_TAIL_BYTES = 4000
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()

# util-linux's setpriv sets the same parent-death signal and execs the command, which lets
# subprocess keep its fast vfork path: a preexec_fn forces a full fork() of the harness, whose
# cost grows with the harness's memory (5 ms and more under pytest with LangGraph loaded).
_SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def _child_setup() -> None:
    """Runs in the child between fork and exec: die with the harness.

    PR_SET_PDEATHSIG fires when the *thread* that forked us exits; the supervisor
    always launches from the thread that then waits for the attempt, so that is fine.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class HarnessError(Exception):
    """The harness could not do its job (bad command, spawn failure): exit code 2."""


def tail(path: str, limit: int = _TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a file, as text ('' when missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return ("..." + text) if size > limit else text


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):  # OSError: out of descriptors
        return []


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group led by ``pid`` and to every descendant.

    For SIGKILL the group is stopped first, so nothing forks out of reach while the
    descendants are listed.  Safe on a process that is already gone.
    """
    freeze = sig == signal.SIGKILL
    if freeze:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGSTOP)
    found = descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def sweep(token: str) -> list[int]:
    """SIGKILL every process whose environment carries this attempt token; return their pids.

    Catches what escaped both the group and the tree (double-forked daemons).
    """
    killed = []
    me = os.getpid()
    needle = f"KILLDRILL_CONTROL_TOKEN={token}".encode()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


@dataclass
class LaunchSpec:
    """Everything needed to start one attempt's process."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None
    stdout_path: str
    stderr_path: str
    number: int
    kill: Kill | None
    timeout_s: float
    signal_name: str = "KILL"  # "KILL", or "TERM" for drain drills
    grace_s: float = 5.0
    control_dir: str = ""
    launcher: Any = None  # a killdrill.launcher.Launcher: fork from a warm template instead of spawning


BoundaryHook = Callable[["Running", TraceEvent, Connection], bool]
"""Called for every boundary before the kill decision; return True to take over the answer
(the hook must then call ``Running.release`` itself later, e.g. a barrier)."""


@dataclass
class Running:
    """An attempt in flight: its process, channel, trace and what has been done to it."""

    spec: LaunchSpec
    listener: ControlListener
    popen: Any  # subprocess.Popen, or a launcher.ForkedProcess
    started: float
    stdout: object
    stderr: object
    trace: list[TraceEvent] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    fired: bool = False
    killed_at: str | None = None
    sent_signal: str | None = None
    outcome: str | None = None
    returncode: int | None = None
    ended: float | None = None
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    pidfd: int | None = None
    term_sent: bool = False

    @property
    def alive(self) -> bool:
        return self.returncode is None

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.started) * 1000.0


class Supervisor:
    """Runs attempts.  Thread-compatible, not thread-safe: one event loop per call.

    ``on_attempt_start(running)`` lets the caller bind per-attempt services (the HTTP
    fakes need the attempt's control address to announce ``during:`` points).
    """

    def __init__(
        self,
        *,
        on_attempt_start: Callable[[Running], None] | None = None,
        boundary_hook: BoundaryHook | None = None,
    ) -> None:
        self.on_attempt_start = on_attempt_start
        self.boundary_hook = boundary_hook
        self._selector: selectors.BaseSelector | None = None
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._running: list[Running] = []

    # ---- public -------------------------------------------------------------------------
    def run(self, spec: LaunchSpec) -> Attempt:
        return self.run_many([spec])[0]

    def run_many(self, specs: Sequence[LaunchSpec]) -> list[Attempt]:
        """Start every spec at once and drive them all to their end."""
        self._selector = selectors.DefaultSelector()
        self._timers = []
        self._running = []
        try:
            with _terminate_as_exception():
                for spec in specs:
                    self._running.append(self._start(spec))
                self._loop()
        finally:
            for run in self._running:
                if run.alive:
                    kill_tree(run.popen.pid)
                    self._reap(run, block=True)
                self._cleanup(run)
            self._selector.close()
            self._selector = None
        return [self._attempt(run) for run in self._running]

    def release(self, run: Running, conn: Connection) -> None:
        """Let a held agent go on (used by hooks that took over an answer)."""
        if run.alive and conn.waiting is not None:
            run.listener.release(conn)

    def kill(self, run: Running, label: str, outcome: str = KILLED) -> None:
        """Kill ``run``'s whole tree now (or begin the TERM drain), recording where and why."""
        if not run.alive or run.outcome is not None:
            return
        run.killed_at = label
        run.outcome = outcome
        if run.spec.signal_name == "TERM" and outcome == KILLED:
            run.sent_signal = "SIGTERM"
            run.term_sent = True
            kill_tree(run.popen.pid, signal.SIGTERM)
            # An agent parked at a boundary cannot drain until it is let go.
            for conn in list(run.listener.connections.values()):
                if conn.waiting is not None:
                    run.listener.release(conn)
            self.at(run.spec.grace_s, lambda: self._after_grace(run))
            return
        run.sent_signal = "SIGKILL"
        kill_tree(run.popen.pid)
        # Anyone else blocked on this channel (an HTTP fake holding a response) sees EOF now.
        run.listener.close_all_connections()

    # ---- internals ----------------------------------------------------------------------
    def _start(self, spec: LaunchSpec) -> Running:
        assert self._selector is not None
        listener = ControlListener(spec.control_dir, self._selector).open()
        env = dict(spec.env)
        env["KILLDRILL_CONTROL"] = listener.address
        env["KILLDRILL_CONTROL_TOKEN"] = listener.token
        env["KILLDRILL_ATTEMPT"] = str(spec.number)
        if spec.launcher is not None:
            from killdrill.launcher import LaunchError

            try:
                forked = spec.launcher.spawn(
                    spec.argv, env=env, cwd=spec.cwd, stdout=spec.stdout_path, stderr=spec.stderr_path
                )
            except LaunchError as exc:
                listener.close()
                raise HarnessError(str(exc)) from exc
            return self._track(spec, listener, forked, None, None)
        stdout = open(spec.stdout_path, "wb")  # noqa: SIM115 - closed in _cleanup
        stderr = open(spec.stderr_path, "wb")  # noqa: SIM115
        try:
            argv = list(spec.argv)
            if _SETPRIV:
                argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
            popen = subprocess.Popen(
                argv,
                env=env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=None if _SETPRIV else _child_setup,
                close_fds=True,
            )
        except OSError as exc:
            stdout.close()
            stderr.close()
            listener.close()
            raise HarnessError(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}") from exc
        return self._track(spec, listener, popen, stdout, stderr)

    def _track(
        self, spec: LaunchSpec, listener: ControlListener, popen: Any, stdout: Any, stderr: Any
    ) -> Running:
        assert self._selector is not None
        run = Running(spec, listener, popen, time.monotonic(), stdout, stderr)
        listener.attach(popen.pid)  # from now on the channel hears only this tree (and the harness)
        try:
            run.pidfd = os.pidfd_open(popen.pid)  # type: ignore[attr-defined]
            self._selector.register(run.pidfd, selectors.EVENT_READ, (None, run))
        except (AttributeError, OSError):
            run.pidfd = None
        kill = spec.kill
        if kill is not None and kill.offset_ms is not None:
            label = str(kill)
            self.at(kill.offset_ms / 1000.0, lambda: self._fire(run, label))
        self.at(spec.timeout_s, lambda: self._timeout(run))
        if self.on_attempt_start is not None:
            self.on_attempt_start(run)
        return run

    def at(self, delay_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` on the event loop after ``delay_s`` seconds."""
        heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._seq), action))

    def _loop(self) -> None:
        assert self._selector is not None
        while any(run.alive for run in self._running):
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                _, _, action = heapq.heappop(self._timers)
                action()
                now = time.monotonic()
            if not any(run.alive for run in self._running):
                break
            wait = self._timers[0][0] - now if self._timers else 1.0
            # Without a pidfd, poll the process at a short interval.
            if any(run.pidfd is None and run.alive for run in self._running):
                wait = min(wait, 0.005)
            for key, _ in self._selector.select(max(0.0, min(wait, 1.0))):
                listener, obj = key.data
                if listener is None:
                    self._reap(obj, block=True)
                elif obj is None:
                    conn = listener.accept()
                    while conn is not None:
                        conn = listener.accept()
                else:
                    self._on_readable(self._owner(listener), listener, obj)
            for run in self._running:
                if run.alive and run.pidfd is None:
                    self._reap(run, block=False)

    def _owner(self, listener: ControlListener) -> Running:
        return next(run for run in self._running if run.listener is listener)

    def _on_readable(self, run: Running, listener: ControlListener, conn: Connection) -> None:
        for msg in listener.read(conn):
            if isinstance(msg, ProtocolError):
                run.errors.append(f"control channel: {msg.message}")
                if msg.fatal:
                    self.kill(run, "protocol-error", outcome=HARNESS_FAILED)
                continue
            self._on_boundary(run, msg)

    def _on_boundary(self, run: Running, msg: BoundaryMessage) -> None:
        run.counts[msg.point] += 1
        event = TraceEvent(msg.point, run.counts[msg.point], round(run.elapsed_ms(), 3), msg.conn.peer_pid)
        run.trace.append(event)
        if run.outcome is not None:  # already being killed or drained: let it run on
            run.listener.release(msg.conn)
            return
        if self.boundary_hook is not None and self.boundary_hook(run, event, msg.conn):
            return
        kill = run.spec.kill
        if kill is not None and not run.fired and kill.at(event.point, event.occurrence):
            run.fired = True
            if kill.hold_ms is not None:
                conn = msg.conn
                run.notes.append(f"held at {event.label} for {kill.hold_ms:g}ms")
                self.at(kill.hold_ms / 1000.0, lambda: self.release(run, conn))
                return
            if kill.delay_ms is not None:
                run.listener.release(msg.conn)
                label = str(kill)
                self.at(kill.delay_ms / 1000.0, lambda: self._fire(run, label))
                return
            self.kill(run, event.label)
            return
        run.listener.release(msg.conn)

    def _fire(self, run: Running, label: str) -> None:
        run.fired = True
        self.kill(run, label)

    def _timeout(self, run: Running) -> None:
        # A drain in progress is bounded by its grace period, not by the timeout.
        if run.alive and run.outcome is None:
            self.kill(run, f"timeout:{run.spec.timeout_s:g}s", outcome=TIMED_OUT)

    def _after_grace(self, run: Running) -> None:
        if run.alive:
            run.notes.append(f"ignored SIGTERM: killed after the {run.spec.grace_s:g}s grace period")
            run.sent_signal = "SIGTERM+SIGKILL"
            kill_tree(run.popen.pid)
            run.listener.close_all_connections()

    def _reap(self, run: Running, *, block: bool) -> None:
        if run.returncode is not None:
            return
        rc = run.popen.wait() if block else run.popen.poll()
        if rc is None:
            return
        run.returncode = rc
        run.ended = time.monotonic()
        # Leave nothing behind: stray members of the group and descendants that outlived the leader.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.popen.pid, signal.SIGKILL)
        if run.pidfd is not None and self._selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(run.pidfd)
            os.close(run.pidfd)
            run.pidfd = None
        run.listener.close_all_connections()
        on_exit = getattr(self.boundary_hook, "on_exit", None)
        if on_exit is not None:
            on_exit(run)

    @property
    def running(self) -> list[Running]:
        return self._running

    def _cleanup(self, run: Running) -> None:
        run.listener.close()
        stranger_note = run.listener.stranger_note()
        if stranger_note:
            run.notes.append(stranger_note)
        for f in (run.stdout, run.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()  # type: ignore[attr-defined]
        escaped = sweep(run.listener.token)
        if escaped:
            run.notes.append(f"killed {len(escaped)} process(es) that escaped the tree: {escaped}")

    def _attempt(self, run: Running) -> Attempt:
        spec = run.spec
        kill = spec.kill
        rc = run.returncode
        outcome = run.outcome
        notes = list(run.notes)
        exited_first = False
        if outcome == KILLED and run.term_sent:
            if rc == DRAINED_EXIT_CODE:
                outcome = DRAINED
            elif rc is not None and rc >= 0:
                notes.append(f"exited {rc} after SIGTERM (drained status is {DRAINED_EXIT_CODE})")
        elif outcome == KILLED and rc is not None and rc >= 0:
            # A timed kill fired in the instant between the agent's own exit and its reaping:
            # it finished by itself, so the kill did not land.
            outcome, run.killed_at, exited_first = None, None, True
            notes.append(f"exited {rc} by itself before the kill at {kill} landed")
        if run.errors:
            outcome = HARNESS_FAILED
        elif outcome is None:
            if kill is not None and not run.fired:
                outcome = NOT_REACHED
            elif kill is not None and kill.is_kill and run.killed_at is None:
                outcome = NOT_REACHED
                if kill.delay_ms is not None and not exited_first:
                    notes.append(f"exited within {kill.delay_ms:g}ms of {kill.point}: the kill missed")
            else:
                outcome = EXITED
        duration = ((run.ended or time.monotonic()) - run.started) * 1000.0
        return Attempt(
            number=spec.number,
            kill=str(kill) if kill is not None else None,
            outcome=outcome,
            returncode=rc,
            duration_ms=round(duration, 3),
            trace=tuple(run.trace),
            killed_at=run.killed_at,
            signal=run.sent_signal,
            stdout_tail=tail(spec.stdout_path),
            stderr_tail=tail(spec.stderr_path),
            notes=tuple(notes + run.errors),
        )


class _Terminated(BaseException):
    """SIGTERM arrived at the harness: unwind so every attempt's tree is killed."""


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """While attempts run, turn a default-handled SIGTERM into an exception (finally blocks run).

    Only from the main thread and only when nobody installed their own handler.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        yield
        return

    def _raise(signum: int, frame: object) -> None:
        raise _Terminated()

    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
