"""A dependency's network cut at a point: ``cut=NAME:TRIGGER`` closes every open connection of
``--proxy NAME`` (both sides, FIN) when a process reaches a point (or at a time);
``rst=NAME:TRIGGER`` resets them (RST to the client, the server's side closed);
``stall=NAME[~Xs]:TRIGGER`` forwards nothing either way for X seconds (5 s when not said): a
dependency that stops answering, the connections left open.  The process that
reaches the trigger is let go: it, and every other process of the case, meets the cut connection
on its next use (a pool's stale connection, a consumer's broken channel).  New connections are
accepted as before: the dependency itself never went down (``restart=`` is that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from killdrill.errors import UsageError
from killdrill.faults.kinds import FaultKind, Scene, register
from killdrill.faults.proxied import Proxies
from killdrill.faults.triggered import AtTrigger
from killdrill.options import DrillOptions
from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running


@dataclass(eq=False)
class Cut(AtTrigger):
    """Cuts (``rst``: resets) every connection of proxy ``fault.target`` at ``fault``'s trigger."""

    fault: Fault
    spec: LaunchSpec
    scene: Scene
    done: bool = False
    said: list[str] = field(default_factory=list)

    def _act(self, trigger: Running, where: str) -> None:
        name, stall_s = _target(self.fault)
        proxy = next((p.get(name) for p in self.scene.fakes if isinstance(p, Proxies)), None)
        trigger.fired = True
        if proxy is None:  # the launch loop is over: nothing is connected any more
            return
        if self.fault.acts == "stall":
            proxy.hold(stall_s)
            note = f"proxy {name} forwarded nothing for {stall_s:g}s from {where}"
        else:
            n = proxy.reset() if self.fault.acts == "rst" else proxy.cut()
            how = "reset" if self.fault.acts == "rst" else "closed"
            note = f"{n} connection{'s' if n != 1 else ''} through proxy {name} {how} at {where}"
        trigger.notes.append(note)
        self.said.append(note)

    def notes(self) -> list[str]:
        return list(self.said)


_STALL = re.compile(r"^(?P<name>[^~]+)(?:~(?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s))?$")
STALL_S = 5.0
"""How long ``stall=NAME:...`` forwards nothing when its target says no ``~Xs``."""


def _target(fault: Fault) -> tuple[str, float]:
    """The proxy's name and, for ``stall``, how long: ``pg``, ``pg~2s``, ``pg~500ms``."""
    m = _STALL.match(fault.target or "")
    if m is None or (m["n"] is not None and fault.acts != "stall"):
        raise UsageError(f"{fault}: expected {fault.acts}=PROXY" + ("[~Xs]" if fault.acts == "stall" else ""))
    if m["n"] is None:
        return m["name"], STALL_S
    seconds = float(m["n"]) / (1000.0 if m["unit"] == "ms" else 1.0)
    if not 0 < seconds <= 3600:
        raise UsageError(f"{fault}: a stall lasts more than 0 and at most 3600 s")
    return m["name"], seconds


def _check(fault: Fault, options: DrillOptions) -> None:
    name, _ = _target(fault)
    if name not in options.proxy:
        known = ", ".join(options.proxy) or "none"
        raise UsageError(f"{fault}: no --proxy named {name!r} (proxies: {known})")


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Cut:
    if scene.options is not None:
        _check(fault, scene.options)
    return Cut(fault, spec, scene)


CUT = register(
    FaultKind("cut", _act, summary="every connection of a --proxy closed at a point or a time", check=_check)
)
STALL = register(
    FaultKind(
        "stall", _act, summary="a --proxy forwards nothing for a while, at a point or a time", check=_check
    )
)
RST = register(
    FaultKind("rst", _act, summary="every connection of a --proxy reset at a point or a time", check=_check)
)
