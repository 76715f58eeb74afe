"""Chaos draws connection faults toward the HTTP fakes when asked (``killdrill chaos --faults net``),
and a dependency's faults (``--faults deps``).

One run in two (decided by the seed and the run's index alone, like every chaos schedule) gets a
``drop:`` or ``reset:`` fault on a ``during:PROVIDER.OP[#N]`` point of the catalogue for its first
attempt, ahead of its kills: the client's own retry logic is drilled, then the process's resume.
Only points a clean run reached are drawn, so a fault on an op the agent calls in-process (not
over HTTP) shows up as ``point_not_reached``: drill such agents with ``--http-fakes`` clients.  A
``--proxy``'s ``during:NAME.commit`` points are in the catalogue like a fake's, so ``net`` draws
``drop:``/``reset:`` on them too.

``deps``: one run in two gets a dependency's fault ahead of its kills, triggered at a point of the
catalogue that another process reaches: ``restart=SERVICE:POINT`` for a ``--serve`` service,
``cut=``/``rst=PROXY:POINT`` for a ``--proxy``; nothing without either.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from killdrill.options import DrillOptions
from killdrill.points import NET_FAULTS, Schedule, parse_fault
from killdrill.records import Discovery


def with_net_fault(schedule: Schedule, discovery: Discovery, seed: int, index: int) -> Schedule:
    """``schedule`` with a connection fault drawn for attempt 1 (or unchanged, one run in two)."""
    rng = random.Random(f"{seed}:{index}:net-faults")
    targets = sorted({label for label in discovery.labels() if label.startswith("during:")})
    if not targets or rng.random() < 0.5:
        return schedule
    fault = rng.choice(NET_FAULTS)
    target = rng.choice(targets).split(":", 1)[1]
    return Schedule((parse_fault(f"{fault}:{target}"), *schedule.faults))


def restartable(options: DrillOptions, services: Sequence[Any]) -> list[str]:
    """What a ``restart=`` may aim at: the ``--serve`` services, and the integrations' services
    running for the drill (``services``: started by its discovery) that offer ``restart()``."""
    theirs = [s.plugin for s in services if getattr(s, "restart", None) is not None and hasattr(s, "plugin")]
    return [*options.serve, *(name for name in theirs if name not in options.serve)]


def with_dependency_fault(
    schedule: Schedule,
    discovery: Discovery,
    seed: int,
    index: int,
    services: Sequence[str],
    proxies: Sequence[str],
) -> Schedule:
    """``schedule`` with a dependency's fault drawn ahead of its kills (or unchanged, one run in
    two, or with no service and no proxy to aim at)."""
    rng = random.Random(f"{seed}:{index}:dependency-faults")
    aims = [("restart", s) for s in services] + [(k, p) for p in proxies for k in ("cut", "rst")]
    if not aims or rng.random() < 0.5:
        return schedule
    kind, target = rng.choice(aims)
    # the trigger is a point reached elsewhere: not the restarted service's own
    triggers = sorted(label for label in discovery.labels() if not label.startswith(f"{target}:"))
    if not triggers:
        return schedule
    return Schedule((parse_fault(f"{kind}={target}:{rng.choice(triggers)}"), *schedule.faults))
