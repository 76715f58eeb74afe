"""A dependency's network cut at a point: ``cut=NAME:TRIGGER`` closes every open connection of
``--proxy NAME`` (both sides, FIN) when a process reaches a point (or at a time);
``rst=NAME:TRIGGER`` resets them (RST to the client, the server's side closed).  The process that
reaches the trigger is let go: it, and every other process of the case, meets the cut connection
on its next use (a pool's stale connection, a consumer's broken channel).  New connections are
accepted as before: the dependency itself never went down (``restart=`` is that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from killdrill.errors import UsageError
from killdrill.faults.kinds import FaultKind, Scene, register
from killdrill.faults.proxied import Proxies
from killdrill.options import DrillOptions
from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Nemesis
from killdrill.records import TraceEvent


@dataclass(eq=False)
class Cut(Nemesis):
    """Cuts (``rst``: resets) every connection of proxy ``fault.target`` at ``fault``'s trigger."""

    fault: Fault
    spec: LaunchSpec
    scene: Scene
    done: bool = False
    said: list[str] = field(default_factory=list)

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        return AtPoints.WAIT if spec is self.spec else None

    def on_start(self, run: Running) -> None:
        if self.done or self.fault.point is not None or run.spec is not self.spec:
            return
        self.done = True
        delay = (self.fault.offset_ms or 0.0) / 1000.0
        self.bound().at(delay, lambda: self._act(run, f"offset:{self.fault.offset_ms or 0.0:g}ms"))

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        if self.done or run.spec is not self.spec or not self.fault.at(event.point, event.occurrence):
            return False
        self.done = True
        self._act(run, event.label)
        self.bound().release(run, conn)
        return True

    def _act(self, trigger: Running, where: str) -> None:
        name = self.fault.target or ""
        proxy = next((p.get(name) for p in self.scene.fakes if isinstance(p, Proxies)), None)
        trigger.fired = True
        if proxy is None:  # the launch loop is over: nothing is connected any more
            return
        n = proxy.reset() if self.fault.acts == "rst" else proxy.cut()
        how = "reset" if self.fault.acts == "rst" else "closed"
        note = f"{n} connection{'s' if n != 1 else ''} through proxy {name} {how} at {where}"
        trigger.notes.append(note)
        self.said.append(note)

    def notes(self) -> list[str]:
        return list(self.said)


def _check(fault: Fault, options: DrillOptions) -> None:
    if fault.target not in options.proxy:
        known = ", ".join(options.proxy) or "none"
        raise UsageError(f"{fault}: no --proxy named {fault.target!r} (proxies: {known})")


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Cut:
    if scene.options is not None:
        _check(fault, scene.options)
    return Cut(fault, spec, scene)


CUT = register(
    FaultKind("cut", _act, summary="every connection of a --proxy closed at a point or a time", check=_check)
)
RST = register(
    FaultKind("rst", _act, summary="every connection of a --proxy reset at a point or a time", check=_check)
)
