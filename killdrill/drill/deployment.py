"""One case of a deployment under one supervisor: the services started and waited for, the
driver started once they are ready, the schedule's faults aimed at whichever process reaches
them (or at the one ``NAME:POINT`` names), a killed service started again with the same command
and port after ``--restart-delay``, a killed driver re-run (its resume), the machine's power
loss (every process killed, then a boot: ``down``), and every service stopped (SIGTERM, SIGKILL
after ``--grace``) when the driver is done.

Every launch of a process is an attempt of its own number (the ledger's ``attempt`` column then
names the process that made a call): the driver's first run is attempt 1, the services' first
starts follow, every restart takes the next number."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from killdrill import envvars
from killdrill.drill.service_watch import Elsewhere, HeldWork, ServiceWatch, ended, last_own_line
from killdrill.drill.settling import Settling
from killdrill.drill.topology import DRIVER, Process, aims_at, from_case_start, service_of
from killdrill.errors import HarnessError
from killdrill.faults.aimed import Aimed
from killdrill.faults.kinds import Batch, Scene
from killdrill.points import Fault, Schedule
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Nemesis, Stage
from killdrill.process.reaping import kill_tree
from killdrill.records import (
    DRAINED,
    KILLED,
    RESUME_FAILED,
    Attempt,
    TraceEvent,
    Violation,
)

SpecFactory = Callable[[Process, int], LaunchSpec]
"""Builds the launch spec of ``process`` as attempt ``number`` (its env, log files, channel)."""

_POLL_S = 0.05


@dataclass
class Deployed:
    """What a deployment's case left: every launch (named), findings, and whether the driver completed."""

    attempts: list[Attempt] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    completed: bool = False
    unreached: Fault | None = None  # the schedule's fault no process reached
    started: dict[int, float] = field(default_factory=dict)  # attempt number -> its monotonic start
    ready_ms: float | None = None  # from the first service's start to every service ready


class DeploymentCase(Nemesis):
    """One deployment case on its supervisor: the case's orchestration (readiness, the driver's
    start and re-runs, a killed service's restart, the settling and the end) and the schedule's
    kills aimed at whichever process reaches them, all through the nemesis protocol.

    A service's readiness and the work lines of the settling are noticed as they are written
    (``drill.service_watch``); ``poll_s`` is the fallback timer's interval, for what no watched
    write tells (a test sets it high: only a write could then be noticed in time)."""

    poll_s = _POLL_S

    def __init__(
        self,
        processes: Sequence[Process],
        make_spec: SpecFactory,
        schedule: Schedule,
        *,
        max_attempts: int,
        restart_delay: float,
        ready_timeout: float,
        grace: float,
        scene: Scene,
        release: Callable[[], None] = lambda: None,
    ) -> None:
        self.scene = scene
        self.release = release  # the case's ports, held until its end
        self.aimed = Aimed(scene)  # the faults of other kinds than a kill, once they landed
        scene.targets = self
        self.processes = list(processes)
        self.make_spec = make_spec
        self.faults = list(schedule.faults)
        self.max_attempts = max_attempts
        self.restart_delay = restart_delay
        self.ready_timeout = ready_timeout
        self.grace = grace
        # the framework's known abort at exit once its work closed (an exit_abort): a clean exit
        self.known_abort: Callable[[Running], bool] = lambda run: False
        self.names: dict[int, Process] = {}  # id(spec) -> process
        self.result = Deployed()
        self.fired: dict[int, str] = {}  # id(spec) -> the fault that landed on it
        self.stopping: set[int] = set()  # id(spec) of processes stopped at the case's end
        self.number = 0
        self.driver_runs = 0
        self.ending = False
        self.waiting: list[Running] = []  # every service's first start, the driver started once all are ready
        self.held: list[LaunchSpec] = []  # services started once those they start after are ready (--after)
        self.watch = ServiceWatch()
        self.watch.on_ready.append(lambda run: self._drive_if_ready())
        self.ticking = False  # the fallback timer is set
        self.deadline = 0.0
        self.driver: LaunchSpec | None = None  # started once every service is ready (None: none to start)
        self.starting = True  # the services are being started: at the case's start, at a boot
        # occurrences of a point in a service (all its replicas and restarts), since the last fault
        self.counts: Counter[tuple[str, str]] = Counter()
        self.elsewhere = Elsewhere()  # services listening off their probe's port, looked at now and then
        self.settling = Settling(HeldWork(self.watch, self._work_line), self._services)
        self.dark: tuple[list[Running], Callable[[], None]] | None = None  # the machine down (down)
        self.due: list[Process] = []  # services whose restart came while it was down

    # ---- the plan of the case: one step, the whole case ----------------------------------------
    def step(self, number: int) -> Batch:
        """Every process's first launch, this case and the nemeses of its other faults acting on
        them: the whole case (the driver re-run and the services restarted inside it)."""
        return Batch(self.specs(), [self, self.aimed], numbers=self.max_attempts)

    def whole(self, attempts: Sequence[Attempt]) -> Deployed:
        """What the case left, read from its one step's attempts."""
        return self.finish(attempts)

    # ---- set up ------------------------------------------------------------------------------
    def specs(self) -> list[LaunchSpec]:
        """The first launch of every process: the driver's (attempt 1, started once the services
        are ready) first in number, the services' started at once."""
        driver = next(p for p in self.processes if p.name == DRIVER)
        self.driver = self._spec(driver)
        self.driver.deferred = True
        services = [self._spec(p) for p in self.processes if p.name != DRIVER]
        for spec in services:
            if self.names[id(spec)].after:
                spec.deferred = True
                self.held.append(spec)
        return [*services, self.driver]

    @property
    def supervisor(self) -> Stage | None:
        return self.stage

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        # every process waits (or sends one way: its spec says so when no fault aims at it)
        return AtPoints.WAIT

    def setup(self, stage: Stage) -> None:
        super().setup(stage)
        self.watch.setup(stage)

    def teardown(self) -> None:
        self.watch.close()
        self.release()

    def begin(self) -> None:
        """The services are started: wait for them to be ready, then start the driver."""
        sup = self.supervisor
        assert sup is not None
        self.deadline = time.monotonic() + self.ready_timeout
        self.waiting = list(sup.running)  # the driver and the --after services are deferred
        for run in self.waiting:
            self._time(run)  # a timed fault for a service's first launch (the step started them)
        self._tick()

    def on_start(self, run: Running) -> None:
        process = self.names[id(run.spec)]
        if process.name != DRIVER:
            self.watch.start(run, process.ready)
            self._ticks()

    def _spec(self, process: Process) -> LaunchSpec:
        self.number += 1
        spec = self.make_spec(process, self.number)
        if process.name != DRIVER:
            spec.timeout_s = 365 * 86400.0  # a service runs as long as the driver needs it
        if not any(aims_at(f, process.name) for f in self.faults):
            spec.env = {**spec.env, envvars.WAIT_AT: "[]"}  # no fault for it: every point one way
        if process.name != DRIVER:
            self.watch.prepare(spec, process.ready)
        self.names[id(spec)] = process
        return spec

    @property
    def current(self) -> Fault | None:
        return self.faults[0] if self.faults else None

    # ---- readiness ---------------------------------------------------------------------------
    def _tick(self) -> None:
        """The fallback timer: every probe not passed yet tried (what no watched write told);
        before the driver's start, the services' ports and the deadline checked."""
        self.ticking = False
        if self.ending:
            return
        self.watch.tick()
        self._drive_if_ready()
        if self.starting:
            waiting = [r for r in self.waiting if id(r.spec) not in self.watch.noticed]
            for run in waiting:
                self._listens_elsewhere(run)
            if waiting and time.monotonic() > self.deadline:
                run = waiting[0]
                self._end()
                err = last_own_line(run) or "(no stderr)"
                raise HarnessError(
                    f"service {self._name(run)} never became ready ({self.names[id(run.spec)].ready})"
                    f" within {self.ready_timeout:g}s; its stderr ends with: {err}"
                )
        if self.starting or self.watch.pending:
            self._ticks()

    def _ticks(self) -> None:
        sup = self.supervisor
        if sup is not None and not self.ticking and not self.ending:
            self.ticking = True
            sup.at(self.poll_s, self._tick)

    def _drive_if_ready(self) -> None:
        """A held service whose dependencies are noticed ready starts; every service's start
        noticed ready (the case's first, or a boot's): the driver starts."""
        sup = self.supervisor
        assert sup is not None
        if self.ending or not self.starting or not self.deadline:
            return
        for spec in list(self.held):
            if all(self._service_ready(dep) for dep in self.names[id(spec)].after):
                self.held.remove(spec)
                run = self._start(spec)
                if run is not None:
                    self.waiting.append(run)
        if self.held or any(id(r.spec) not in self.watch.noticed for r in self.waiting):
            return
        self.starting = False
        if self.result.ready_ms is None:
            first = min((r.started for r in sup.running), default=time.monotonic())
            self.result.ready_ms = round((time.monotonic() - first) * 1000.0, 3)
        if self.driver is not None:
            self._start(self.driver)

    def _service_ready(self, service: str) -> bool:
        """Has every replica of ``service`` started and passed its probe (its first start)?"""
        if any(self.names[id(spec)].service == service for spec in self.held):
            return False
        runs = [r for r in self.waiting if self.names[id(r.spec)].service == service]
        return bool(runs) and all(id(r.spec) in self.watch.noticed for r in runs)

    def _listens_elsewhere(self, run: Running) -> None:
        """A service up and listening, but not on the port its probe knocks on, fails now."""
        why = self.elsewhere.why(run, self.names[id(run.spec)].ready)
        if why is not None:
            self._end()
            raise HarnessError(f"service {self._name(run)} {why}")

    def _ready(self, run: Running) -> bool:
        return self.names[id(run.spec)].ready is None or self.watch.attempt(run)

    # ---- the nemesis's protocol --------------------------------------------------------------
    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        """A waiting boundary: the current fault lands here if it aims at this process and point."""
        group = service_of(self._name(run))
        self.counts[(group, event.point)] += 1
        fault = self.current
        if fault is None or self.ending or id(run.spec) in self.fired or fault.point is None:
            return False
        occurrence = self.counts[(group, event.point)]
        if not aims_at(fault, self._name(run)) or not fault.at(event.point, occurrence):
            return False
        self.faults.pop(0)
        self.counts.clear()  # the next fault counts from here, as a single command's next attempt
        self.fired[id(run.spec)] = str(fault)
        # its kind's nemesis acts it out (faults/kill.py for a kill; it must answer the point)
        return self.aimed.land(replace(fault, occurrence=occurrence), run, event, conn)

    def on_exit(self, run: Running) -> None:
        """A process ended: restart it, re-run it, or end the case (the machine down: its boot,
        once every process is reaped)."""
        if self.dark is not None:
            self._boot(run)
            return
        if self.ending:
            return
        process = self.names[id(run.spec)]
        self.watch.gone(run)
        rc = run.returncode
        killed = id(run.spec) in self.fired and run.outcome == KILLED
        if process.name == DRIVER:
            if run.outcome is None and (rc == 0 or self.known_abort(run)):
                self.result.completed = True
                self._settle()
            elif (killed or (run.outcome is None and rc != 0)) and self.driver_runs < self.max_attempts:
                self._start(self._spec(process))  # the client's resume
            else:
                self._end()  # the driver failed for good: the verdict fails without the services' work
            return
        if self.settling.since is not None and not killed:
            self._end()  # a service gone while finishing its work: its end is the case's
            return
        if killed:
            sup = self.supervisor
            assert sup is not None
            sup.at(self.restart_delay, lambda: self._restart(process, run), keep=True)
            return
        if self.driver_runs == 0:
            self._end()
            err = "; ".join(run.errors) or last_own_line(run) or "(no stderr)"
            raise HarnessError(
                f"service {process.name} {ended(rc)} before it was ready; its stderr ends with: {err}"
            )
        self.result.violations.append(
            Violation(
                RESUME_FAILED,
                f"service {process.name} (attempt {run.spec.number}) {ended(rc)} while the driver was"
                f" still running"
                + (f"; its stderr ends with: {last_own_line(run)}" if last_own_line(run) else ""),
                detail={"process": process.name, "attempt": run.spec.number, "returncode": rc},
            )
        )
        self._end()

    # ---- what other kinds' nemeses aim at (faults.kinds.Targets) -------------------------------
    def launches(self, name: str) -> list[Running]:
        sup = self.supervisor
        assert sup is not None
        return [r for r in sup.running if r.alive and name in (self._name(r), service_of(self._name(r)))]

    def ready(self, run: Running) -> bool:
        return run.alive and self._ready(run)

    def when_ready(self, action: Callable[[], None]) -> None:
        self.watch.on_ready.append(lambda run: action())

    def kill(self, run: Running, label: str) -> None:
        sup = self.supervisor
        assert sup is not None
        self.fired[id(run.spec)] = label
        run.fired = True
        sup.kill(run, label)

    def outage(self, victims: list[Running], what: str) -> Callable[[], None]:
        return self.settling.outage(victims, what)

    def _work_line(self) -> None:
        """A followed stderr was written: read now while a dependency is down (the timing of its
        work lines matters), and settle once the driver is done."""
        if self.settling.since is None:
            self.settling.read()
        else:
            self._settle(timer=False)

    def down(self, label: str, dark: Callable[[], None]) -> None:
        sup = self.supervisor
        assert sup is not None
        live = [r for r in sup.running if r.alive]
        self.dark = (live, dark)
        for run in live:
            if run.outcome is None:
                self.kill(run, label)

    def _boot(self, run: Running) -> None:
        """``run``, a launch of the machine that went down, reaped; the last brings it back: what
        the fault does while it is off, then the boot, as the case's start (a process manager's
        boot: no ``--restart-delay``): the services started again (``--after`` ones once their
        dependencies are ready), the driver re-run once all are (one more of its runs)."""
        assert self.dark is not None
        gone, dark = self.dark
        self.watch.gone(run)
        if any(r.alive for r in gone):
            return
        self.dark, (names, self.due) = None, ([self.names[id(r.spec)] for r in gone] + self.due, [])
        dark()
        rerun = self.driver_runs == 0 or any(p.name == DRIVER for p in names)
        if self.ending or (rerun and self.driver_runs >= self.max_attempts):
            return self._end()
        specs = [self._spec(p) for p in names if p.name != DRIVER]  # numbers after every launch before
        self.driver = self._spec(next(p for p in self.processes if p.name == DRIVER)) if rerun else None
        self.held = [s for s in specs if self.names[id(s)].after]
        self.waiting = [r for s in specs if not self.names[id(s)].after and (r := self._start(s))]
        self.starting, self.deadline = True, time.monotonic() + self.ready_timeout
        self._drive_if_ready()
        self._ticks()

    # ---- the case's end ------------------------------------------------------------------------
    def _settle(self, timer: bool = True) -> None:
        """The driver is done: the case ends once the services finished the work they hold and
        the dependencies killed under them are back (``drill.settling``).  Checked as a service's
        stderr is written (``timer`` False: only when a work line came) and on the fallback timer."""
        sup = self.supervisor
        assert sup is not None
        if self.ending:
            return
        if self.settling.since is None:
            self.settling.since = time.monotonic()
        if not self.settling.read() and not timer:
            return
        if not self.settling.may_end(self.ready_timeout):
            if timer:
                sup.at(self.poll_s, self._settle)
            return
        self._end()

    # ---- internals -----------------------------------------------------------------------------
    def _restart(self, process: Process, killed: Running) -> None:
        """A killed service, started again as a process manager does: same command, same port
        (killed before it was ready: the driver waits for the new launch instead)."""
        if self.dark is not None:
            self.due.append(process)  # at the boot
        elif not self.ending:
            run = self._start(self._spec(process))
            if run is not None and killed in self.waiting:
                self.waiting[self.waiting.index(killed)] = run
                self._ticks()

    def _services(self) -> list[Running]:
        sup = self.supervisor
        return [] if sup is None else [r for r in sup.running if self._name(r) != DRIVER]

    def _name(self, run: Running) -> str:
        return self.names[id(run.spec)].name

    def _start(self, spec: LaunchSpec) -> Running | None:
        sup = self.supervisor
        assert sup is not None
        if self.ending:
            return None
        if self.names[id(spec)].name == DRIVER:
            self.driver_runs += 1
        run = sup.start(spec)
        self._time(run)
        return run

    def _time(self, run: Running) -> None:
        """The current fault, when it is a timed one for ``run``'s process, set off on it."""
        sup = self.supervisor
        assert sup is not None
        fault = self.current
        if fault is not None and fault.point is None and aims_at(fault, self._name(run)):
            self.faults.pop(0)
            self.fired[id(run.spec)] = str(fault)
            first = min(r.started for r in sup.running) if run.spec is self.driver else run.started
            self.aimed.land(from_case_start(fault, run, first), run, None, None)

    def _end(self) -> None:
        """The case is over: every process still running gets SIGTERM, SIGKILL after the grace."""
        self.ending = True
        sup = self.supervisor
        assert sup is not None
        live = [r for r in sup.running if r.alive]
        for run in live:
            self.stopping.add(id(run.spec))
            if run.outcome is None:
                run.outcome, run.term_sent, run.sent_signal = DRAINED, True, "SIGTERM"
            kill_tree(run.popen.pid, signal.SIGTERM, keeper=getattr(run.popen, "keeper", None))
            for conn in list(run.listener.connections.values()):
                if conn.waiting is not None:
                    run.listener.release(conn)

        def hard() -> None:
            for run in live:
                if run.alive:
                    run.notes.append(f"ignored SIGTERM: killed after the {self.grace:g}s grace period")
                    run.sent_signal = "SIGTERM+SIGKILL"
                    kill_tree(run.popen.pid, signal.SIGKILL, keeper=getattr(run.popen, "keeper", None))

        sup.at(self.grace, hard)

    def finish(self, attempts: Sequence[Attempt]) -> Deployed:
        """The attempts of the supervisor's run, each named by its process, with its fault."""
        sup = self.supervisor
        assert sup is not None
        out = self.result
        for run, a in zip(sup.running, attempts, strict=True):
            out.started[run.spec.number] = run.started
            key = id(run.spec)
            a = replace(a, process=self.names[key].name, kill=self.fired.get(key))
            if key in self.stopping and a.outcome == DRAINED:
                a = replace(a, notes=(*a.notes, "stopped at the case's end"))
            if a.number == 1 and out.ready_ms is not None:
                a = replace(
                    a,
                    notes=(
                        *a.notes,
                        f"started once the services were ready, {out.ready_ms:.0f} ms"
                        " after the first of them started",
                    ),
                )
            out.attempts.append(a)
        out.attempts.sort(key=lambda a: a.number)
        out.unreached = self.current
        return out
