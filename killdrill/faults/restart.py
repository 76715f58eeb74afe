"""A dependency that dies: ``restart=SERVICE:TRIGGER`` SIGKILLs a ``--serve`` service (its whole
tree: a broker, a database, a runtime's server) when another process reaches a point, or at a
time, and the deployment starts it again as it restarts any killed service (same command, same
port, after ``--restart-delay``).  The processes are not held meanwhile: they meet the outage and
the service's startup; the case's notes say how long the service was down (from the kill to its
new launch passing its readiness probe).

``restart=redis:worker:after:charge``: when process ``worker`` reaches ``after:charge``, redis
goes down; the worker is let go at once and meets the outage where it is (an unacknowledged
message, a transaction in flight, a task mid-dispatch).  ``restart=redis:offset:2s``: 2 s into
the case.  The target is named apart from the trigger (``points.GRAMMAR``); the process that
reaches the trigger is not killed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from killdrill.errors import UsageError
from killdrill.faults.kinds import FaultKind, Scene, Targets, register
from killdrill.faults.triggered import AtTrigger
from killdrill.options import DrillOptions
from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running


@dataclass(eq=False)
class Restart(AtTrigger):
    """Kills every live launch of service ``fault.target`` once ``fault``'s trigger is reached."""

    fault: Fault
    spec: LaunchSpec
    targets: Targets
    done: bool = False
    said: list[str] = field(default_factory=list)
    watching: str | None = None  # what was done, while the service is not back yet

    def _act(self, trigger: Running, where: str) -> None:
        target = self.fault.target or ""
        victims = self.targets.launches(target)
        trigger.fired = True
        if not victims:
            trigger.notes.append(f"{self.fault}: service {target} was not running at {where}: nothing killed")
            return
        for victim in victims:
            self.targets.kill(victim, f"{self.fault}")
        names = ", ".join(f"attempt {v.spec.number}" for v in victims)
        gone = {id(v.spec) for v in victims}
        trigger.notes.append(f"{target} killed and restarted here ({self.fault})")
        what = f"service {target} ({names}) killed when {where} was reached"
        since = time.monotonic()
        self.watching = what
        self.targets.when_ready(lambda: self._back(target, gone, what, since))

    def _back(self, target: str, gone: set[int], what: str, since: float) -> None:
        """A launch was noticed ready: is the service back (every new launch of it ready)?  Said
        once (asking a replica may notice it, and call this again)."""
        if self.watching != what:
            return
        fresh = [r for r in self.targets.launches(target) if id(r.spec) not in gone]
        if fresh and all(self.targets.ready(r) for r in fresh) and self.watching == what:
            down_ms = (time.monotonic() - since) * 1000.0
            back = ", ".join(f"attempt {r.spec.number}" for r in fresh)
            self.said.append(f"{what}; ready again ({back}) {down_ms:.0f} ms later")
            self.watching = None

    def teardown(self) -> None:
        if self.watching is not None:
            self.said.append(f"{self.watching}; not ready again when the case ended")
            self.watching = None

    def notes(self) -> list[str]:
        return list(self.said)


def _check(fault: Fault, options: DrillOptions) -> None:
    services = list(options.serve)
    if not services:
        raise UsageError(f"{fault}: restart= kills and restarts a --serve service; this drill has none")
    if fault.target not in services:
        raise UsageError(f"{fault}: no --serve service {fault.target!r} (services: {', '.join(services)})")


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Restart:
    if scene.options is not None:
        _check(fault, scene.options)
    if scene.targets is None:
        raise UsageError(f"{fault}: restart= kills and restarts a --serve service; this drill has none")
    return Restart(fault, spec, scene.targets)


KIND = register(
    FaultKind(
        "restart",
        _act,
        summary="a --serve service (a broker, a database, a runtime's server) killed and started again"
        " when another process reaches a point, or at a time",
        check=_check,
    )
)
