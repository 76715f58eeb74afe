"""Connection faults toward the HTTP fakes: ``drop:PROVIDER.OP[#N][~Xs]`` (the provider commits,
the response is held, the connection closed unanswered) and ``reset:PROVIDER.OP[#N]`` (reset
before the request is processed); and toward a dependency through its ``--proxy NAME``
(``drop:NAME.commit``: the server committed, the answer is lost; ``reset:NAME.commit``: reset with
``COMMIT`` unsent).  The fakes and the proxies apply them (``FakesServer.arm`` counts the launch's
requests of the op, ``Proxies.arm`` its proxy's); this nemesis arms them for its launch as it
starts.  Not a kill: the
attempt lives on and its client retries; the fault counts as reached once it landed."""

from __future__ import annotations

from dataclasses import dataclass

from killdrill.fakes.http import FakesServer
from killdrill.faults.kinds import FaultKind, Scene, register
from killdrill.faults.proxied import Proxies
from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.nemesis import AtPoints, Nemesis


@dataclass(eq=False)
class ConnectionFault(Nemesis):
    """Arms ``fault`` in the case's HTTP fakes and fault proxies for the launch of ``spec``."""

    fault: Fault
    spec: LaunchSpec
    scene: Scene

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        # Its launch waits at its points and gates its effects as an armed kill's does: the
        # timing it was drilled with (the fakes, not the supervisor, act on the point).
        return AtPoints.GATE if spec is self.spec else None

    def on_start(self, run: Running) -> None:
        if run.spec is not self.spec:
            return
        for server in self.scene.fakes:
            if isinstance(server, FakesServer | Proxies):  # the SMTP fake takes no connection fault
                server.arm(run)


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> ConnectionFault:
    return ConnectionFault(fault, spec, scene)


DROP = register(
    FaultKind("drop", _act, summary="the response of a request to a fake lost, the connection closed")
)
RESET = register(FaultKind("reset", _act, summary="a request to a fake reset before it is processed"))
