"""Chaos draws connection faults toward the HTTP fakes when asked (``killdrill chaos --faults net``).

One run in two (decided by the seed and the run's index alone, like every chaos schedule) gets a
``drop:`` or ``reset:`` fault on a ``during:PROVIDER.OP[#N]`` point of the catalogue for its first
attempt, ahead of its kills: the client's own retry logic is drilled, then the process's resume.
Only points a clean run reached are drawn, so a fault on an op the agent calls in-process (not
over HTTP) shows up as ``point_not_reached``: drill such agents with ``--http-fakes`` clients.
"""

from __future__ import annotations

import random

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
