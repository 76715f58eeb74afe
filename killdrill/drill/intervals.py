"""Boundary intervals of a clean run, and timing-free kills resolved against them.

A random kill is named in coordinates that do not depend on timing: an interval (``start``,
from spawn to the first boundary, or a boundary label, from it to the next one) and a
position inside it as a percentage (``after:charge_customer+37.5%``).  The seed alone fixes
that text; only when a case runs is the percentage turned into milliseconds, from the
interval's length in the discovery at hand.  Cheap to import: the drill resolves every
schedule it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from killdrill.points import Fault, Schedule, ScheduleError
from killdrill.records import CatalogueEntry, Discovery

__all__ = ["START", "Interval", "intervals", "resolve_kill", "resolve_schedule", "strata"]

START = "(start)"
"""Name of the interval from spawn to the first boundary (imports, startup)."""


@dataclass(frozen=True)
class Interval:
    """From a boundary (``label``, reached ``start_ms`` after spawn) to the next one."""

    label: str
    start_ms: float
    length_ms: float


def intervals(discovery: Discovery) -> list[Interval]:
    """The clean run's boundary intervals in order; the last one ends when the process exits."""
    return _intervals(discovery.catalogue, discovery.duration_ms)


def _intervals(cat: Sequence[CatalogueEntry], duration_ms: float) -> list[Interval]:
    end = max(duration_ms, cat[-1].t_ms if cat else 0.0)
    out = []
    for i, entry in enumerate(cat):
        nxt = cat[i + 1].t_ms if i + 1 < len(cat) else end
        out.append(Interval(entry.label, entry.t_ms, max(0.0, nxt - entry.t_ms)))
    return out


def _length(discovery: Discovery, label: str) -> float | None:
    """The interval after ``label``: in the clean run of the thread that reached it (per-thread
    baselines: the case runs under that thread), else in the discovery's first run."""
    own = discovery.run_for(label)
    catalogues = [own.catalogue] if own is not None else []
    catalogues += [discovery.catalogue, *(run.catalogue for run in discovery.runs)]
    for cat in catalogues:
        for iv in _intervals(cat, discovery.duration_ms):
            if iv.label == label:
                return iv.length_ms
    return None


def strata(discovery: Discovery) -> list[str]:
    """Every interval a random kill can aim at, ``START`` first, then the labels sorted.

    Sorted rather than in catalogue order: parallel branches reach their boundaries in any
    order, and the seed must pick the same interval whatever order this discovery saw.
    """
    return [START, *sorted(discovery.labels())]


def _ms(pct: float, length_ms: float) -> float:
    return round(pct / 100.0 * length_ms, 3)


def resolve_kill(kill: Fault, discovery: Discovery) -> Fault:
    """Fill a percentage kill's milliseconds from the discovery's interval lengths."""
    if kill.pct is None:
        return kill
    cat = discovery.catalogue
    if kill.point is None:
        first = cat[0].t_ms if cat else discovery.duration_ms
        return replace(kill, offset_ms=_ms(kill.pct, first))
    label = kill.point if kill.occurrence == 1 else f"{kill.point}#{kill.occurrence}"
    if kill.process is not None:  # a deployment's catalogue names a service's points NAME:POINT
        label = f"{kill.process.split('[')[0]}:{label}"
    length = _length(discovery, label)
    if length is None and kill.process is not None:
        length = _length(discovery, label.split(":", 1)[1])  # the driver's own points
    if length is not None:
        return replace(kill, delay_ms=_ms(kill.pct, length))
    raise ScheduleError(
        str(kill),
        f"{label} is not in the clean run's catalogue, so its interval has no length to take a share of",
    )


def resolve_schedule(schedule: Schedule, discovery: Discovery) -> Schedule:
    """``schedule`` with every percentage kill resolved; its text is unchanged."""
    if all(k.pct is None for k in schedule):
        return schedule
    return Schedule(tuple(resolve_kill(k, discovery) for k in schedule))
