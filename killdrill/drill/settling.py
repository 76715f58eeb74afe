"""A deployment's end: the services finish the work they said they hold, and a dependency the
drill killed comes back, before the case ends.

A durable runtime recovers the work a killed process left (``integrations._work``'s lines say
it); ended as soon as the driver is done, a case's verdict would depend on whether the runtime
got to it first.  A dependency killed under the services (``restart=``) is the same race: its
clients' work comes back once it is up (a broker redelivers the message whose ack it never got),
so the case waits for it, and work a client said done while the dependency was down is not
counted (an ack written to a socket whose broker is gone never reached it).  Bounded by the
readiness timeout; what was still held then is said in the notes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from killdrill.drill.service_watch import HeldWork
from killdrill.process.attempts import Running
from killdrill.process.readiness import connected_to, listening

_NOTED_S = 0.05  # a wait shorter than this is not worth a note


class Settling:
    """The work the services hold and the outages of their dependencies, read from ``services()``
    (the case's launches but the driver's) as their stderr grows (``on_line`` at each write)."""

    def __init__(self, work: HeldWork, services: Callable[[], list[Running]]) -> None:
        self.work = work
        self.services = services
        self.since: float | None = None  # when the driver finished
        self.settled: dict[int, tuple[Running, list[str]]] = {}  # id(spec) -> the work waited for
        self.outages: dict[object, dict[int, str]] = {}  # a dependency down: its clients' id(spec)

    def read(self) -> bool:
        """The services' work lines written since the last read: did one come?  Done said by a
        client of a dependency that is down is not counted."""
        doubted = {key: what for cut in self.outages.values() for key, what in cut.items()}
        return self.work.read(self.services(), doubted)

    def outage(self, victims: list[Running], what: str) -> Callable[[], None]:
        """``victims`` are about to be killed: their clients (launches connected to a port they
        listen on) are cut off from ``what`` until the returned call, the dependency back."""
        ports = set().union(*(listening(v.popen.pid) for v in victims if v.alive))
        cut = {
            id(r.spec): what
            for r in self.services()
            if r.alive and r not in victims and ports and connected_to(r.popen.pid, ports)
        }
        self.read()  # what they said before the kill counts
        token = object()
        self.outages[token] = cut

        def over() -> None:
            self.read()  # what they said while it was down does not
            self.outages.pop(token, None)

        return over

    def may_end(self, timeout: float) -> bool:
        """The driver is done (since :attr:`since`): may the case end now?  Not while a service
        holds work or a dependency is down, up to ``timeout``; the notes say what was waited for,
        or left."""
        assert self.since is not None
        held = self.work.held(self.services())  # unfinished work, done in any process of the case
        for run, works in held:
            self.settled.setdefault(id(run.spec), (run, works))
        waited = time.monotonic() - self.since
        if (held or self.outages) and waited < timeout:
            return False
        for run, works in held:
            run.notes.append(
                f"the case ended {waited:.0f}s after the driver finished while this process still"
                f" held {', '.join(works)}: the effects of that work are not in the verdict"
            )
        if waited >= _NOTED_S and not held:
            for run, works in self.settled.values():
                run.notes.append(
                    f"the case ended {waited * 1000.0:.0f} ms after the driver finished, once this"
                    f" process finished {', '.join(works)} it held"
                )
        return True
