"""Faults whose launch is decided as the case runs (a deployment's: the first process of the
right service to reach the point), built when they land and routed to from then on.

A deployment's case counts a point over every replica and restart of a service and lands the
schedule's current fault on the process that reaches it, here, whatever its kind (a kill too):
its kind's nemesis is built for that launch, set up on the supervisor, and given the boundary
(the occurrence the deployment counted) or, for a time, the launch's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from killdrill.faults.kinds import Scene, kind_of
from killdrill.points import Fault
from killdrill.process.attempts import Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import Nemesis
from killdrill.records import TraceEvent


@dataclass(eq=False)
class Aimed(Nemesis):
    """The nemeses of the faults that landed so far, each asked as the supervisor asks its own."""

    scene: Scene
    acting: list[Nemesis] = field(default_factory=list)

    def land(self, fault: Fault, run: Running, event: TraceEvent | None, conn: Connection | None) -> bool:
        """``fault`` lands on ``run``: at ``event`` (its occurrence as counted by the caller) where
        the agent waits on ``conn``, or, with no event, at a time (``fault.offset_ms`` from now)."""
        nemesis = kind_of(fault).act(fault, run.spec, self.scene)
        nemesis.setup(self.bound())
        self.acting.append(nemesis)
        if event is None or conn is None:
            nemesis.on_start(run)
            return True
        return nemesis.on_boundary(run, replace(event, occurrence=fault.occurrence), conn)

    def on_start(self, run: Running) -> None:
        for nemesis in self.acting:
            nemesis.on_start(run)

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        return any(nemesis.on_boundary(run, event, conn) for nemesis in self.acting)

    def on_exit(self, run: Running) -> None:
        for nemesis in self.acting:
            nemesis.on_exit(run)

    def teardown(self) -> None:
        for nemesis in self.acting:
            nemesis.teardown()

    def notes(self) -> list[str]:
        return [note for nemesis in self.acting for note in nemesis.notes()]
