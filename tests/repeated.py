"""Repeated drills of a framework example: the bars are counts over repetitions, not one case.

- "each framework's correct example passes a full drill 20 times without a false alarm":
  :func:`pass_every_round` runs every catalogue point, round after round, on one drill (one
  discovery, one fork template);
- "each planted bug is caught at its point with the expected kind every time":
  :func:`catch_every_time` runs each (point -> expected catch) of a bug N times and fails with the
  tally and the first miss of each point, rather than at the first miss.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from killdrill.drill import Drill
from killdrill.records import CaseResult

REPEAT_ENV = "KILLDRILL_BUG_REPEAT"


@dataclass(frozen=True)
class Catch:
    """What a case at one point must report: exactly these kinds, the first one on ``provider``."""

    kinds: tuple[str, ...]
    provider: str


def repeat(default: int = 10) -> int:
    """How many times each planted-bug point runs (``KILLDRILL_BUG_REPEAT``)."""
    return int(os.environ.get(REPEAT_ENV, str(default)))


def workers() -> int:
    """Cases at once in a repeated full drill (``KILLDRILL_SLOW_WORKERS``, 1)."""
    return int(os.environ.get("KILLDRILL_SLOW_WORKERS", "1"))


def pass_every_round(drill: Drill, rounds: int) -> None:
    """Every point of the drill's catalogue, ``rounds`` times: any case not exactly-once fails."""
    points = drill.points()
    for n in range(1, rounds + 1):
        started = time.monotonic()
        result = drill.run_all()
        print(f"round {n}: {len(result.cases)} cases, {time.monotonic() - started:.0f} s", flush=True)
        failed = [c for c in result.cases if not c.ok]
        assert len(result.cases) == len(points) and not failed, f"round {n}:\n" + "\n\n".join(
            c.text() for c in failed
        )


def miss(case: CaseResult, point: str, catch: Catch) -> str | None:
    """Why this case is no catch of ``catch`` at ``point`` (None: it is)."""
    if not case.attempts or case.attempts[0].killed_at != point:
        return f"the kill did not land at {point}"
    if set(case.kinds) != set(catch.kinds):
        return f"kinds {case.kinds or '(none)'}, expected {catch.kinds}"
    first = next(v for v in case.violations if v.kind == catch.kinds[0])
    if first.provider != catch.provider:
        return f"{catch.kinds[0]} on {first.provider}, expected {catch.provider}"
    return None


def catch_every_time(drill: Drill, cases: dict[str, Catch], times: int) -> str:
    """Run every point ``times`` times; return the tally (``point: caught/times``), assert no miss."""
    caught = dict.fromkeys(cases, 0)
    first_miss: dict[str, str] = {}
    for _ in range(times):
        for point, catch in cases.items():
            case = drill.run_case(point)
            why = miss(case, point, catch)
            if why is None:
                caught[point] += 1
            else:
                first_miss.setdefault(point, f"{why}\n{case.text()}")
    tally = ", ".join(f"{p}: {n}/{times}" for p, n in caught.items())
    print(tally, flush=True)
    assert not first_miss, tally + "\n\n" + "\n\n".join(f"{p}: {m}" for p, m in first_miss.items())
    return tally
