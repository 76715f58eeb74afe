"""The protocol of a fault as the supervisor sees it (Jepsen's nemesis): what it routes to.

A *fault* is what a schedule says (``points.Fault``: ``before:charge+3ms``, ``pause:after:x``); a
*nemesis* is the object that acts it out on running processes: one class per fault kind, in
``killdrill/faults/`` (one file each), built from the schedule by ``faults.kinds``.  The supervisor
knows nothing of kills, holds, pauses or barriers: it asks its nemeses, in order, at each step of
its loop, and keeps its own generic duties (timeouts, reaping, the TERM drain, protocol errors).

The protocol lives here, below ``faults/``, because the supervisor (``process``) may not import
what is above it; the implementations import it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.records import KILLED, TraceEvent


class AtPoints(enum.IntEnum):
    """How a launch treats its points, asked of the nemeses before it starts (the strongest wins).

    ``ONE_WAY``: no nemesis acts at this launch's points; every point is sent one way
    (``KILLDRILL_WAIT_AT=[]``), the agent never waits.  ``GATE``: the agent waits at every point,
    and no effect lands while a kill at it is decided (``KILLDRILL_KILL_GATE``).  ``WAIT``: the
    agent waits at every point without the gate (a nemesis that answers a point late, a hold, a
    barrier, a pause, a deployment's routing, overrides a kill's gate).
    """

    ONE_WAY = 0
    GATE = 1
    WAIT = 2


@dataclass(frozen=True)
class Missed:
    """A fault aimed at a launch that did not land: the launch's outcome is ``point_not_reached``
    (a case that tested nothing there is no pass), with ``note`` added to its notes (None: none)."""

    note: str | None = None


def fault_armed_at(run: Running, event: TraceEvent) -> bool:
    """Is ``run``'s own fault (``LaunchSpec.fault``) yet to act at ``event`` (not fired, and aimed
    at this point and occurrence)?  What comes first at a point: the launch's scheduled fault."""
    fault = run.spec.fault
    return fault is not None and not run.fired and fault.at(event.point, event.occurrence)


def after_start(run: Running, offset_ms: float) -> float:
    """Seconds from now until ``offset_ms`` after ``run`` started: a timed fault counts from its
    launch's start, however late it is handed the launch (a deployment's services)."""
    return max(0.0, offset_ms / 1000.0 - (time.monotonic() - run.started))


class Stage(Protocol):
    """What a nemesis may do through the supervisor running it (its loop's start, answer, kill,
    timers and watched fds); a stand-in with these members drives a nemesis in a unit test."""

    @property
    def running(self) -> list[Running]:
        """Every launch started so far, in order, live or not."""
        ...

    def start(self, spec: LaunchSpec) -> Running:
        """Start one more launch inside the running loop (a deferred resumer, a restart)."""
        ...

    def release(self, run: Running, conn: Connection) -> None:
        """Answer a boundary the nemesis took: the agent goes on."""
        ...

    def kill(self, run: Running, label: str, outcome: str = KILLED) -> None:
        """Kill ``run``'s whole tree now (or begin the TERM drain), recording ``label`` as where."""
        ...

    def at(self, delay_s: float, action: Callable[[], None], keep: bool = False) -> None:
        """Run ``action`` on the loop after ``delay_s`` seconds (a nemesis's timers); ``keep``:
        the loop waits for it even when no launch is alive."""
        ...

    def watch(self, fd: int, action: Callable[[], None]) -> None:
        """Run ``action`` on the loop whenever ``fd`` is readable (a file written: an inotify fd),
        until ``unwatch`` or the loop's end; the fd stays the nemesis's to close (``teardown``)."""
        ...

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (unknown: nothing)."""
        ...


class Nemesis:
    """One fault acting on a supervisor's launches.  Every method is a no-op by default (but the
    two questions below): a nemesis overrides what it acts on.  Called on the supervisor's loop,
    one at a time, in the order the nemeses were given (the first to take a boundary ends its
    routing).

    ``setup`` binds it to the stage before any launch; ``begin`` runs once the launches not
    deferred are started (start deferred ones: a deployment's driver once its services are
    ready); ``at_points`` says, before a launch starts, whether it acts at the launch's points;
    ``on_start`` / ``on_exit`` see each launch start and end (reaped); ``on_boundary`` sees each
    point a launch waits at and returns True when it took the answer (it must then release or
    kill the launch itself, now or from a timer); ``teardown`` runs once the loop is over, every
    launch reaped; ``notes`` says what it did, for the case's report (what it did to one launch
    goes in ``Running.notes``).

    Two questions the supervisor asks to judge a launch, whose defaults read the launch's own
    record (its ``LaunchSpec.fault``; ``Running.fired``, set by whichever nemesis acted it out),
    so every nemesis gives the same default answer and a kind says only what differs:
    ``armed_at`` (a point sent one way where a fault was yet to act: the agent broke the
    protocol) and ``missed`` (the launch ended by itself: did its fault land?).  A fault that
    never acted did not land; the kill's rule is stricter (``faults.kill``: its launch must die
    of it)."""

    stage: Stage | None = None

    def setup(self, stage: Stage) -> None:
        self.stage = stage

    def begin(self) -> None:
        return None

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        """None: this nemesis has no say about ``spec``'s points."""
        return None

    def on_start(self, run: Running) -> None:
        return None

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        return False

    def on_exit(self, run: Running) -> None:
        return None

    def armed_at(self, run: Running, event: TraceEvent) -> bool:
        """Is a fault yet to act at ``event`` of ``run``?  (The supervisor refuses a launch that
        sent such a point one way: its fault could not land there.)"""
        return fault_armed_at(run, event)

    def missed(self, run: Running) -> Missed | None:
        """Asked once ``run`` ended by itself (no kill, no harness error): a fault aimed at it that
        did not land, or None (it landed, or none was aimed at it)."""
        return Missed() if run.spec.fault is not None and not run.fired else None

    def teardown(self) -> None:
        return None

    def notes(self) -> list[str]:
        return []

    def bound(self) -> Stage:
        """The stage this nemesis was set up on (a nemesis acting before ``setup`` is a bug)."""
        assert self.stage is not None, f"{type(self).__name__} acted before setup"
        return self.stage
