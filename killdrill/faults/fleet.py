"""Fleet faults: the zombie worker drawn by chaos (``pause:POINT``, acted out by
killdrill.faults.pause) and the upgrade (``resume_with``).

**The upgrade.**  ``resume_with`` (``--resume-with -- CMD...``) runs attempts 2..k with another
command (version N+1), discovery and the baseline stay the first command's (version N): a
deploy must not change what the run does.
"""

from __future__ import annotations

from collections.abc import Sequence

from killdrill.points import Fault, Schedule, ScheduleError
from killdrill.records import Attempt

CHAOS_FAULTS = ("kill", "pause", "upgrade", "net", "power", "deps")
"""What chaos may draw (``--faults``): kills always; pauses, upgrades, connection faults
(``net``: drop:/reset: toward the HTTP fakes and the proxies, killdrill.faults.network), power
losses (``power``: a kill turned into ``powerloss:``, killdrill.faults.powerloss) and a
dependency's faults (``deps``: restart=, cut=, rst=) when asked."""


def draw_faults(
    schedule: Schedule, labels: Sequence[str], seed: int, index: int, faults: Sequence[str]
) -> Schedule:
    """Chaos run ``index`` with pauses drawn in (a function of the seed, the index and the labels).

    Half the runs turn their first kill into a pause at the boundary it aims at (the first
    boundary for a kill before any), half of those continue the zombie at a random point of
    the resumer instead of its exit.  Upgrades are not drawn here: with ``upgrade`` every run
    resumes with ``--resume-with``'s command.
    """
    if "pause" not in faults or not schedule.faults or not labels:
        return schedule
    import random

    rng = random.Random(f"killdrill-chaos:{seed}:{index}:pause")
    paused, until, other = rng.random() < 0.5, rng.random() < 0.5, rng.choice(list(labels))
    if not paused:
        return schedule
    first = schedule.faults[0]
    aim = (first.point, first.occurrence) if first.point is not None else _split_label(labels[0])
    pause = Fault(point=aim[0], occurrence=aim[1], pause=True, until=other if until else None)
    rest = schedule.faults[1:]
    if rest and rest[0].pause:
        rest = rest[1:]
    return Schedule((pause, *rest))


def _split_label(label: str) -> tuple[str, int]:
    point, _, occ = label.partition("#")
    return point, int(occ) if occ else 1


def check_schedule(schedule: Schedule) -> None:
    """A pause's resumer runs the next item: it may be a kill, not another pause."""
    for first, second in zip(schedule.faults, schedule.faults[1:], strict=False):
        if first.pause and second.pause:
            raise ScheduleError(
                f"{first},{second}", "the resumer of a pause cannot be paused itself; put a kill or nothing"
            )


def upgrade_notes(
    first: Sequence[str], resume_with: Sequence[str] | None, attempts: Sequence[Attempt]
) -> list[str]:
    """Say which attempts ran the upgrade, and that the yardstick is the first command's."""
    later = [a.number for a in attempts if a.number > 1]
    if not resume_with or not later:
        return []
    import shlex

    return [
        f"upgrade: attempt(s) {', '.join(map(str, sorted(set(later))))} ran {shlex.join(resume_with)};"
        f" judged against the clean run of {shlex.join(first)}"
    ]


def resume_argv(first: Sequence[str], resume_with: Sequence[str] | None, number: int) -> Sequence[str]:
    """The command of attempt ``number``: the upgrade's from attempt 2 on, when there is one."""
    return resume_with if resume_with and number > 1 else first
