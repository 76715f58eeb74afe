"""The hold: ``POINT~Xs`` holds the agent parked at a point for X, then lets it go (no kill: a
hung call, for a framework's per-node timeouts)."""

from __future__ import annotations

from dataclasses import dataclass

from killdrill.faults.kinds import FaultKind, Scene, register
from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Nemesis
from killdrill.records import TraceEvent


@dataclass(eq=False)
class Hold(Nemesis):
    """Holds the launch of ``spec`` at ``fault``'s point for ``fault.hold_ms``."""

    fault: Fault
    spec: LaunchSpec

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        return AtPoints.WAIT if spec is self.spec else None

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        if run.spec is not self.spec or run.fired or not self.fault.at(event.point, event.occurrence):
            return False
        stage = self.bound()
        run.fired = True
        hold_ms = self.fault.hold_ms or 0.0
        run.notes.append(f"held at {event.label} for {hold_ms:g}ms")
        stage.at(hold_ms / 1000.0, lambda: stage.release(run, conn))
        return True


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Hold:
    return Hold(fault, spec)


KIND = register(FaultKind("hold", _act, summary="hold the agent at a point for a while, then let it go"))
