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

The target may also be an integration's service the drill runs for every case (a runtime's
server: ``restart=NAME:worker:during:payments.charge`` for ``--integration NAME``), when
the service offers ``restart()`` (``integrations.contract.Service``): killed at the trigger, started
again on its own state and address from a thread of the nemesis (after ``--restart-delay``), the
trigger's attempt recording it (``Attempt.restarted``: it has no attempt of its own), the case's
notes saying how long it was down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from killdrill.errors import HarnessError, UsageError
from killdrill.faults.kinds import FaultKind, Scene, Targets, register
from killdrill.faults.triggered import AtTrigger
from killdrill.integrations import IntegrationNotFound, find
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
    over: Callable[[], None] | None = None  # the outage's end, told to the deployment

    def _act(self, trigger: Running, where: str) -> None:
        target = self.fault.target or ""
        victims = self.targets.launches(target)
        trigger.fired = True
        if not victims:
            trigger.notes.append(f"{self.fault}: service {target} was not running at {where}: nothing killed")
            return
        self.over = self.targets.outage(victims, f"its dependency {target}")
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
            if self.over is not None:
                self.over()

    def teardown(self) -> None:
        if self.watching is not None:
            self.said.append(f"{self.watching}; not ready again when the case ended")
            self.watching = None

    def notes(self) -> list[str]:
        return list(self.said)


@dataclass(eq=False)
class ServiceRestart(AtTrigger):
    """Kills an integration's service (its ``restart()`` hook) once ``fault``'s trigger is reached,
    and starts it again from a thread of its own, ``delay`` seconds later."""

    fault: Fault
    spec: LaunchSpec
    services: Callable[[], Any]
    delay: float = 0.0
    done: bool = False
    said: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def _act(self, trigger: Running, where: str) -> None:
        target = self.fault.target or ""
        trigger.fired = True
        service = next((s for s in self.services() if getattr(s, "plugin", None) == target), None)
        hook = getattr(service, "restart", None)
        if hook is None:
            why = (
                "is not running" if service is None else "offers no restart() (integrations.contract.Service)"
            )
            trigger.errors.append(f"{self.fault}: the {target} integration's service {why}: nothing killed")
            return
        try:
            again = hook()
        except HarnessError as exc:
            trigger.errors.append(f"{self.fault}: {exc}")
            return
        since = time.monotonic()
        trigger.restarted.append(target)
        trigger.notes.append(f"{target} killed and restarted here ({self.fault})")
        what = f"the {target} integration's service killed when {where} was reached"
        self.thread = threading.Thread(
            target=self._again, args=(again, what, since), name="killdrill-restart", daemon=True
        )
        self.thread.start()

    def _again(self, again: Callable[[], str], what: str, since: float) -> None:
        time.sleep(self.delay)
        try:
            started = again()
        except Exception as exc:  # said in the case's notes; the run meets a dependency that is gone
            self.said.append(f"{what}; not started again: {exc}")
            return
        down_ms = (time.monotonic() - since) * 1000.0
        self.said.append(f"{what}; {started}, answering again {down_ms:.0f} ms after the kill")

    def teardown(self) -> None:
        if self.thread is not None:
            self.thread.join()  # bounded by the hook's own start timeout: the next case needs it up

    def notes(self) -> list[str]:
        return list(self.said)


def _integration_services(options: DrillOptions) -> list[str]:
    """The enabled integrations that run a service for the drill, by name."""
    names = []
    for name in options.integrations:
        try:
            found = find(name)
        except IntegrationNotFound:  # said where the integrations are loaded
            continue
        if found.service is not None:
            names.append(found.name)
    return names


def _check(fault: Fault, options: DrillOptions) -> None:
    services = list(options.serve)
    theirs = _integration_services(options)
    if not services and not theirs:
        raise UsageError(
            f"{fault}: restart= kills and restarts a --serve service or an integration's service;"
            " this drill has none"
        )
    if fault.target not in services and fault.target not in theirs:
        known = [f"--serve {', '.join(services)}"] if services else []
        known += [f"integrations' {', '.join(theirs)}"] if theirs else []
        raise UsageError(
            f"{fault}: no --serve service or integration's service {fault.target!r}"
            f" (services: {'; '.join(known)})"
        )


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Restart | ServiceRestart:
    if scene.options is not None:
        _check(fault, scene.options)
        if fault.target not in scene.options.serve:
            return ServiceRestart(fault, spec, scene.services, scene.options.restart_delay)
    if scene.targets is None:
        raise UsageError(f"{fault}: restart= kills and restarts a --serve service; this drill has none")
    return Restart(fault, spec, scene.targets)


KIND = register(
    FaultKind(
        "restart",
        _act,
        summary="a --serve service (a broker, a database, a runtime's server) or an integration's"
        " service (restart=NAME:... of --integration NAME) killed and started again when another"
        " process reaches a point, or at a time",
        check=_check,
    )
)
