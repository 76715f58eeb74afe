"""A whole fault kind in one file, for the tests: ``mark[=TAG]:TRIGGER`` notes ``mark TAG at
POINT`` on the launch that reaches the trigger, then lets it go.  Its grammar entry names this
module; importing it declares both (tests/unit/faults/test_kinds.py)."""

from __future__ import annotations

from dataclasses import dataclass

from killdrill import points
from killdrill.faults import kinds
from killdrill.faults.kinds import FaultKind
from killdrill.points import Fault, FaultGrammar
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Nemesis
from killdrill.records import TraceEvent

GRAMMAR = points.declare(
    FaultGrammar("mark", "tests.unit.faults.mark_kind", target="optional", summary="note a tag")
)


@dataclass(eq=False)
class Mark(Nemesis):
    """Notes ``mark <TAG> at <POINT>`` on the launch that reaches the fault's point, once."""

    fault: Fault
    spec: LaunchSpec

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        return AtPoints.WAIT if spec is self.spec else None

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        if run.spec is not self.spec or run.fired or not self.fault.at(event.point, event.occurrence):
            return False
        run.fired = True
        run.notes.append(f"mark {self.fault.target or '-'} at {event.label}")
        self.bound().release(run, conn)
        return True


KIND = kinds.register(FaultKind("mark", lambda fault, spec, scene: Mark(fault, spec)))
