"""The kill: SIGKILL of one launch's whole process tree at a point, a delay after it, or at a time.

``POINT`` kills the agent parked at the point's ``#N``-th occurrence; ``POINT+Xms`` lets it go
and kills it X ms later (``POINT+F%`` resolved against the clean run's intervals to that);
``offset:Xms`` kills X ms after the launch started, wherever it is (``start+F%`` resolved to
that).  The supervisor's ``kill`` does the killing (or the TERM drain of ``--signal TERM``).

A kill lands only when its launch dies of it: fired is not enough (a delay the launch outlived
by exiting first, a timer that found it gone), and the launch is then ``point_not_reached``.
"""

from __future__ import annotations

from dataclasses import dataclass

from killdrill.faults.kinds import FaultKind, Scene, register
from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Missed, Nemesis, after_start
from killdrill.records import TraceEvent


@dataclass(eq=False)
class Kill(Nemesis):
    """Kills the launch of ``spec`` as ``fault`` says (``Running.fired`` once it acts)."""

    fault: Fault
    spec: LaunchSpec

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        if spec is not self.spec:
            return None
        return AtPoints.ONE_WAY if self.fault.point is None else AtPoints.GATE

    def on_start(self, run: Running) -> None:
        if run.spec is self.spec and self.fault.offset_ms is not None:
            delay = after_start(run, self.fault.offset_ms)
            self.bound().at(delay, lambda: self._fire(run, str(self.fault)))

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        if run.spec is not self.spec or run.fired or not self.fault.at(event.point, event.occurrence):
            return False
        stage = self.bound()
        run.fired = True
        if self.fault.delay_ms is not None:
            stage.release(run, conn)
            label = str(self.fault)
            stage.at(self.fault.delay_ms / 1000.0, lambda: self._fire(run, label))
        else:
            self._fire(run, event.label)
        return True

    def missed(self, run: Running) -> Missed | None:
        """Its launch ended by itself although the kill fired: it missed.  A delay's timer that
        found the launch gone (no signal sent) says so; a signal that raced the launch's own exit
        is the supervisor's note."""
        if run.spec is not self.spec or not run.fired or run.killed_at is not None:
            return super().missed(run)
        delay = self.fault.delay_ms
        if delay is not None and run.sent_signal is None:
            return Missed(f"exited within {delay:g}ms of {self.fault.point}: the kill missed")
        return Missed()

    def _fire(self, run: Running, label: str) -> None:
        run.fired = True
        self.bound().kill(run, label)


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Kill:
    return Kill(fault, spec)


KIND = register(
    FaultKind("kill", _act, summary="SIGKILL of the launch's tree at a point, a delay after it, or a time")
)
