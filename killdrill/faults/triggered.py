"""A nemesis that acts once, at its fault's trigger: the point its launch reaches (that launch let
go at once: it meets what the fault did where it is) or, for a time trigger, a delay after the
launch it counts from started.  The faults whose target is not the process that reaches the
trigger (``restart=``, ``cut=``/``rst=``/``stall=``) say only what they do there: ``_act``."""

from __future__ import annotations

import abc

from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Nemesis, after_start
from killdrill.records import TraceEvent


class AtTrigger(Nemesis, abc.ABC):
    """Acts once at ``fault``'s trigger in launch ``spec`` (subclasses are dataclasses with the
    fields ``fault``, ``spec`` and ``done``)."""

    fault: Fault
    spec: LaunchSpec
    done: bool

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        return AtPoints.WAIT if spec is self.spec else None

    def on_start(self, run: Running) -> None:
        """A time trigger: ``fault.offset_ms`` after the launch started (handed over at its start
        or, in a deployment, once the launch is known)."""
        if self.done or self.fault.point is not None or run.spec is not self.spec:
            return
        self.done = True
        offset = self.fault.offset_ms or 0.0
        self.bound().at(after_start(run, offset), lambda: self._act(run, f"offset:{offset:g}ms"))

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        if self.done or run.spec is not self.spec or not self.fault.at(event.point, event.occurrence):
            return False
        self.done = True
        self._act(run, event.label)
        self.bound().release(run, conn)  # the trigger's process goes on into what the fault did
        return True

    @abc.abstractmethod
    def _act(self, trigger: Running, where: str) -> None:
        """Do the fault, ``trigger`` being the launch that reached it, ``where`` the trigger's label."""
