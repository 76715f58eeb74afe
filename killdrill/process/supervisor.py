"""The supervisor's event loop: start attempts, answer their boundaries, time them out, reap them;
and the registry of running supervisors that ``interrupt_all`` stops."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from killdrill import envvars
from killdrill.errors import HarnessError
from killdrill.integrations import without_work
from killdrill.process import containment
from killdrill.process.attempts import LaunchSpec as LaunchSpec
from killdrill.process.attempts import Running as Running
from killdrill.process.control import BoundaryMessage, Connection, ControlListener, ProtocolViolation
from killdrill.process.forks import TemplateError, live_templates, warden
from killdrill.process.interrupts import Interrupted as Interrupted
from killdrill.process.interrupts import last_signal, terminate_as_exception
from killdrill.process.nemesis import AtPoints, Nemesis
from killdrill.process.reaping import kill_tree as kill_tree
from killdrill.process.reaping import sweep as sweep
from killdrill.process.reaping import tail as tail
from killdrill.process.tracing import MAX_POINTS as MAX_POINTS
from killdrill.process.tracing import in_sent_order, is_conn, trace_drained, traced
from killdrill.records import (
    DRAINED,
    EXITED,
    KILLED,
    Attempt,
    AttemptOutcome,
)

DRAINED_EXIT_CODE = 75
"""Exit status an agent uses to say "I drained on SIGTERM, my checkpoint is committed"."""

_active: set[Supervisor] = set()
_active_lock = threading.Lock()
_interrupted = threading.Event()


def interrupt_all() -> None:
    """Kill every attempt of every supervisor of this process now; their loops raise Interrupted.

    Called from the main thread on Ctrl-C / SIGTERM while worker threads run cases: no new
    attempt starts until ``clear_interrupt()``.
    """
    _interrupted.set()
    with _active_lock:
        supervisors = list(_active)
    for template in live_templates():
        template.kill_all()  # every attempt under a keeper, even one whose spawn reply is in flight
    for sup in supervisors:
        for run in list(sup.running):
            if run.alive and getattr(run.popen, "keeper", None) is None:
                kill_tree(run.popen.pid)


def _interruption() -> Interrupted:
    """What a loop raises after ``interrupt_all``: the one :class:`Interrupted`, with the signal
    that caused it (SIGINT when it was called without one)."""
    return Interrupted(last_signal() or signal.SIGINT)


def clear_interrupt() -> None:
    _interrupted.clear()


class Supervisor:
    """Runs attempts.  Thread-compatible, not thread-safe: one event loop per call.

    ``prepare(spec)`` completes each launch's spec just before it starts (its own fakes URL),
    ``on_attempt_start(running)`` lets the caller bind per-attempt services (the HTTP
    fakes need the attempt's control address to announce ``during:`` points).  ``faults``: the
    case's nemeses (``process.nemesis``), set up on this supervisor; it routes every launch's
    start, waiting boundary and exit to them, in order, and knows nothing of what they do.
    """

    def __init__(
        self,
        *,
        on_attempt_start: Callable[[Running], None] | None = None,
        prepare: Callable[[LaunchSpec], None] | None = None,
        faults: Sequence[Nemesis] = (),
    ) -> None:
        self.on_attempt_start = on_attempt_start
        self.prepare = prepare
        self.faults = tuple(faults)
        self._selector: selectors.BaseSelector | None = None
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._kept = 0  # timers the loop waits for with nothing alive (a service's restart)
        self._seq = itertools.count()
        self._running: list[Running] = []

    # ---- public -------------------------------------------------------------------------
    def run(self, spec: LaunchSpec) -> Attempt:
        return self.run_many([spec])[0]

    def run_many(self, specs: Sequence[LaunchSpec]) -> list[Attempt]:
        """Start every spec at once (but the deferred ones) and drive them all to their end.

        The attempts are returned in the order they started; a deferred spec never started has none.
        """
        self._selector = selectors.DefaultSelector()
        self._timers = []
        self._kept = 0
        self._running = []
        with _active_lock:
            _active.add(self)
        try:
            with terminate_as_exception():
                for fault in self.faults:
                    fault.setup(self)
                for spec in specs:
                    if not spec.deferred:
                        self.start(spec)
                for fault in self.faults:
                    fault.begin()  # may start deferred specs itself (a deployment's driver)
                self._loop()
        finally:
            with _active_lock:
                _active.discard(self)
            for run in self._running:
                if run.alive:
                    self._kill_tree(run)
                    self._reap(run, block=True)
                self._cleanup(run)
            self._selector.close()
            self._selector = None
            for fault in self.faults:
                fault.teardown()
        return [self._attempt(run) for run in self._running]

    def start(self, spec: LaunchSpec) -> Running:
        """Start one more attempt inside the running loop (a nemesis's deferred resumer)."""
        if self.prepare is not None:
            self.prepare(spec)
        run = self._start(spec)
        self._running.append(run)
        return run

    def release(self, run: Running, conn: Connection) -> None:
        """Let a held agent go on (used by nemeses that took over an answer)."""
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
            self._kill_tree(run, signal.SIGTERM)
            # An agent parked at a boundary cannot drain until it is let go.
            for conn in list(run.listener.connections.values()):
                if conn.waiting is not None:
                    run.listener.release(conn)
            self.at(run.spec.grace_s, lambda: self._after_grace(run))
            return
        run.sent_signal = "SIGKILL"
        self._kill_tree(run)
        trace_drained(run, MAX_POINTS)  # a timed kill: the points it had sent one way are where it died
        # Anyone else blocked on this channel (an HTTP fake holding a response) sees EOF now.
        run.listener.close_all_connections()

    # ---- internals ----------------------------------------------------------------------
    def _kill_tree(self, run: Running, sig: int = signal.SIGKILL) -> None:
        kill_tree(run.popen.pid, sig, keeper=getattr(run.popen, "keeper", None))

    def _start(self, spec: LaunchSpec) -> Running:
        assert self._selector is not None
        if _interrupted.is_set():
            raise _interruption()
        listener = ControlListener(spec.control_dir, self._selector).open()
        env = dict(spec.env)
        env[envvars.CONTROL] = listener.address
        env[envvars.CONTROL_TOKEN] = listener.token
        env[envvars.ATTEMPT] = str(spec.number)
        at_points = self.at_points(spec)
        if at_points is AtPoints.ONE_WAY:
            # No point to act on (a clean run, a resume, a timed kill): every point goes one way.
            # An attempt armed at a point still waits at all of them, as it always did: its other
            # threads reach the kill at the pace they always had.  With every point one way, a
            # kill at a parallel branch's committed:pay caught the planted uuid-key bug in 9 of 120
            # cases (the other branches ran on to their commits first); waiting, 40 of 180, the
            # tree before 26 of 180.
            env[envvars.WAIT_AT] = "[]"
        elif at_points is AtPoints.GATE:
            env[envvars.KILL_GATE] = "1"  # killdrill.agent._Gate: no effect lands while it is decided
        template, exec_ = spec.template, False
        try:
            if template is None and containment.supported():
                template, exec_ = warden(), True
            if template is not None:
                forked = template.spawn(
                    spec.argv, env=env, cwd=spec.cwd, stdout=spec.stdout_path, stderr=spec.stderr_path,
                    exec_=exec_,
                )  # fmt: skip
                return self._track(spec, listener, forked, None, None)
        except TemplateError as exc:
            listener.close()
            raise HarnessError(str(exc)) from exc
        return self._popen(spec, listener, env)

    def _popen(self, spec: LaunchSpec, listener: ControlListener, env: dict[str, str]) -> Running:
        """Without keepers (no prctl: not Linux): a plain child in its own session."""
        import subprocess

        stdout = open(spec.stdout_path, "wb")  # noqa: SIM115 - closed in _cleanup
        stderr = open(spec.stderr_path, "wb")  # noqa: SIM115
        try:
            popen = subprocess.Popen(
                list(spec.argv),
                env=env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            stdout.close()
            stderr.close()
            listener.close()
            raise HarnessError(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}") from exc
        return self._track(spec, listener, popen, stdout, stderr)

    def _track(
        self,
        spec: LaunchSpec,
        listener: ControlListener,
        popen: Any,
        stdout: IO[bytes] | None,
        stderr: IO[bytes] | None,
    ) -> Running:
        assert self._selector is not None
        run = Running(spec, listener, popen, time.monotonic(), stdout, stderr)
        # From now on the channel hears only this attempt's tree (its keeper's, when it has one:
        # orphans are re-parented to the keeper) and the harness.
        listener.attach(run.tree_root)
        try:
            # With a keeper, the attempt is over when the keeper exits: nothing of it is left then.
            run.pidfd = os.pidfd_open(run.tree_root)
            self._selector.register(run.pidfd, selectors.EVENT_READ, (None, run))
        except (AttributeError, OSError):
            run.pidfd = None
        self.at(spec.timeout_s, lambda: self._timeout(run))
        if self.on_attempt_start is not None:
            self.on_attempt_start(run)
        for fault in self.faults:
            fault.on_start(run)
        return run

    def at_points(self, spec: LaunchSpec) -> AtPoints:
        """How ``spec``'s launch treats its points: the strongest say of the nemeses (one way
        when none acts at them)."""
        said = [a for a in (fault.at_points(spec) for fault in self.faults) if a is not None]
        return max(said, default=AtPoints.ONE_WAY)

    def at(self, delay_s: float, action: Callable[[], None], keep: bool = False) -> None:
        """Run ``action`` on the event loop after ``delay_s`` seconds; ``keep``: the loop waits
        for it even when no launch is alive (a restart after ``--restart-delay`` of the only
        process running)."""
        if keep:
            self._kept += 1

            def kept(action: Callable[[], None] = action) -> None:
                self._kept -= 1
                action()

            action = kept
        heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._seq), action))

    def watch(self, fd: int, action: Callable[[], None]) -> None:
        """Run ``action`` on the event loop whenever ``fd`` is readable (a nemesis's own events:
        a file written), until ``unwatch`` or the end of the run (the fd stays the caller's)."""
        assert self._selector is not None
        self._selector.register(fd, selectors.EVENT_READ, action)

    def unwatch(self, fd: int) -> None:
        if self._selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(fd)

    def _loop(self) -> None:
        # Every boundary of every attempt passes through here: the armed round trip's harness half.
        assert self._selector is not None
        select, timers = self._selector.select, self._timers
        while self._kept or any(run.alive for run in self._running):
            if _interrupted.is_set():
                raise _interruption()
            now = time.monotonic()
            if timers and timers[0][0] <= now:
                while timers and timers[0][0] <= now:
                    _, _, action = heapq.heappop(timers)
                    action()
                    now = time.monotonic()
                if not self._kept and not any(run.alive for run in self._running):
                    break
            wait = timers[0][0] - now if timers else 1.0
            # Without a pidfd, poll the process at a short interval.
            unwatched = [run for run in self._running if run.pidfd is None and run.alive]
            if unwatched:
                wait = min(wait, 0.005)
            ready = select(max(0.0, min(wait, 1.0)))
            self._on_messages([key.data for key, _ in ready if is_conn(key.data)])
            for key, _ in ready:
                if callable(key.data):  # a watched fd (watch)
                    key.data()
                    continue
                listener, obj = key.data
                if listener is None:
                    self._reap(obj, block=True)
                elif obj is None:
                    conn = listener.accept()
                    while conn is not None:
                        conn = listener.accept()
            for run in unwatched:
                if run.alive:
                    self._reap(run, block=False)

    def _owner(self, listener: ControlListener) -> Running:
        if len(self._running) == 1:
            return self._running[0]
        return next(run for run in self._running if run.listener is listener)

    def _on_messages(self, readable: list[tuple[ControlListener, Connection]]) -> None:
        """The messages of every connection found readable at once, in the order they were sent:
        one-way points by their own time (a tree's processes each have a connection; the order
        the harness reads them in is not the order their points were passed in: an MCP server's
        ``during:`` point read after the agent's next one), the rest as read now."""
        read = [(self._owner(listener), msg) for listener, conn in readable for msg in listener.read(conn)]
        for run, msg in in_sent_order(read) if len(readable) > 1 else read:  # one's come in order
            if isinstance(msg, ProtocolViolation):
                run.errors.append(f"control channel: {msg.message}")
                if msg.fatal:
                    self.kill(run, "protocol-error", outcome=AttemptOutcome.HARNESS_ERROR)
                continue
            self._on_boundary(run, msg)

    def _on_boundary(self, run: Running, msg: BoundaryMessage) -> None:
        if len(run.trace) >= MAX_POINTS:
            if run.outcome is None:
                loop = "(a loop around boundary()?)"
                self._refuse(run, f"more than {MAX_POINTS:,} points in one attempt {loop}")
            elif msg.waits:
                run.listener.release(msg.conn)  # a TERM drain goes on, untraced
            return
        event = traced(run, msg)
        if not msg.waits:  # nobody waits for an answer: only a point no fault is armed at
            if run.outcome is None and any(fault.armed_at(run, event) for fault in self.faults):
                self._refuse(
                    run,
                    f"the agent did not wait at {event.label}, where it was to be killed: the kill could"
                    f" not land there (an agent that sets {envvars.WAIT_AT} itself?)",
                )
            return
        if run.outcome is not None:  # already being killed or drained: let it run on
            run.listener.release(msg.conn)
            return
        for fault in self.faults:
            if fault.on_boundary(run, event, msg.conn):
                return
        run.listener.release(msg.conn)

    def _refuse(self, run: Running, why: str) -> None:
        """The agent broke the control protocol: the attempt is killed as a harness error."""
        run.errors.append(f"control channel: {why}")
        self.kill(run, "protocol-error", outcome=AttemptOutcome.HARNESS_ERROR)

    def _timeout(self, run: Running) -> None:
        # A drain in progress is bounded by its grace period, not by the timeout.
        if run.alive and run.outcome is None:
            self.kill(run, f"timeout:{run.spec.timeout_s:g}s", outcome=AttemptOutcome.HANG)

    def _after_grace(self, run: Running) -> None:
        if run.alive:
            run.notes.append(f"ignored SIGTERM: killed after the {run.spec.grace_s:g}s grace period")
            run.sent_signal = "SIGTERM+SIGKILL"
            self._kill_tree(run)
            trace_drained(run, MAX_POINTS)
            run.listener.close_all_connections()

    def _reap(self, run: Running, *, block: bool) -> None:
        if run.returncode is not None:
            return
        try:
            rc = run.popen.wait() if block else run.popen.poll()
        except TemplateError:
            # Its keeper killed the whole attempt when the template died (or was killed by it).
            run.errors.append("the fork template died during the attempt; every process of it was killed")
            rc = -signal.SIGKILL
        if rc is None:
            return
        run.returncode = rc
        run.ended = time.monotonic()
        if getattr(run.popen, "keeper", None) is None:
            # Leave nothing behind: stray members of the group (a keeper has seen to everything).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.popen.pid, signal.SIGKILL)
        if run.pidfd is not None and self._selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(run.pidfd)
            os.close(run.pidfd)
            run.pidfd = None
        if run.outcome is None or run.term_sent:  # it ran on to its end: keep every point it passed
            trace_drained(run, MAX_POINTS)
        run.listener.close_all_connections()
        for fault in self.faults:
            fault.on_exit(run)

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
                    f.close()
        escaped = sweep(run.listener.token) if getattr(run.popen, "keeper", None) is None else []
        if escaped:
            run.notes.append(f"killed {len(escaped)} process(es) that escaped the tree: {escaped}")

    def _attempt(self, run: Running) -> Attempt:
        """``run`` as the attempt it was: how it ended (a harness error, killed, drained, hung,
        exited), or, when it ended by itself, ``point_not_reached`` if a nemesis says the fault
        aimed at it missed (``Nemesis.missed``)."""
        spec = run.spec
        rc = run.returncode
        outcome = run.outcome
        notes = list(run.notes)
        if outcome == KILLED and run.term_sent:
            if rc == DRAINED_EXIT_CODE:
                outcome = DRAINED
            elif rc is not None and rc >= 0:
                notes.append(f"exited {rc} after SIGTERM (drained status is {DRAINED_EXIT_CODE})")
        elif outcome == KILLED and rc is not None and rc >= 0:
            # A timed kill fired in the instant between the agent's own exit and its reaping:
            # it finished by itself, so the kill did not land.
            outcome, run.killed_at = None, None
            notes.append(f"exited {rc} by itself before the kill at {spec.fault} landed")
        if run.errors:
            outcome = AttemptOutcome.HARNESS_ERROR
        elif outcome is None:
            said = [m for m in (fault.missed(run) for fault in self.faults) if m is not None]
            outcome = AttemptOutcome.POINT_NOT_REACHED if said else EXITED
            notes.extend(dict.fromkeys(m.note for m in said if m.note))
        duration = ((run.ended or time.monotonic()) - run.started) * 1000.0
        return Attempt(
            number=spec.number,
            kill=str(spec.fault) if spec.fault is not None else None,
            outcome=outcome,
            returncode=rc,
            duration_ms=round(duration, 3),
            trace=tuple(run.trace),
            killed_at=run.killed_at,
            signal=run.sent_signal,
            stdout_tail=tail(spec.stdout_path),
            stderr_tail=without_work(tail(spec.stderr_path)),
            notes=tuple(notes + run.errors),
            restarted=tuple(run.restarted),
        )
