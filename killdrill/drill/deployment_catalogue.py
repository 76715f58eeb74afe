"""A deployment's clean runs read for discovery: one attempt for the catalogue (every process's
points, a service's named ``NAME:POINT``), why a clean run failed said of the process that failed,
and whether a label is reached by some process of the catalogue."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from killdrill.drill.deployment import Deployed
from killdrill.drill.service_watch import ended
from killdrill.drill.topology import DRIVER, service_of
from killdrill.records import Attempt, CatalogueEntry, TraceEvent


def merged(attempts: Sequence[Attempt], started: dict[int, float]) -> Attempt:
    """A clean deployment run as one attempt for the catalogue: every process's points, a
    service's named ``NAME:POINT``, at ms since the first start (its duration too)."""
    zero = min(started.values()) if started else 0.0
    events: list[TraceEvent] = []
    for a in attempts:
        shift = (started.get(a.number, zero) - zero) * 1000.0
        prefix = "" if a.process in (None, DRIVER) else f"{service_of(a.process or '')}:"
        events += [replace(e, point=prefix + e.point, t_ms=round(e.t_ms + shift, 3)) for e in a.trace]
    events.sort(key=lambda e: e.t_ms)
    seen: Counter[str] = Counter()  # a service's replicas count one point together
    for i, e in enumerate(events):
        seen[e.point] += 1
        events[i] = replace(e, occurrence=seen[e.point])
    drivers = [a for a in attempts if a.process == DRIVER]
    if not drivers:  # the services never got ready: what the first of them left
        return attempts[0]
    last = drivers[-1]
    span = last.duration_ms + (started.get(last.number, zero) - zero) * 1000.0  # from the first start
    return replace(last, trace=tuple(events), duration_ms=round(span, 3))


def clean_failure(deployed: Deployed) -> tuple[str, str] | None:
    """Why a deployment's clean run failed, said of the process that failed: ``(what happened,
    the stderr to show)``.  A service that ended on its own is named with its exit and stderr,
    not the driver stopped after it; a driver that failed with a service's traceback in the
    service's log shows that log's tail beside the driver's."""
    for v in deployed.violations:
        name, number = v.detail.get("process"), v.detail.get("attempt")
        if name is None:
            continue
        own = next((a for a in deployed.attempts if a.number == number), None)
        text = own.stderr_tail.strip() if own is not None else ""
        how = f"service {name} {ended(v.detail.get('returncode'))} while the driver was still running"
        return how, f"--- service {name} (attempt {number}) stderr (tail) ---\n{text or '(no stderr)'}"
    drivers = [a for a in deployed.attempts if a.process == DRIVER]
    if not drivers:
        return None
    driver, shown, crashed = drivers[-1], [], []
    if driver.stderr_tail.strip():
        shown.append(f"--- driver stderr (tail) ---\n{driver.stderr_tail.strip()}")
    for a in deployed.attempts:
        if a.process not in (None, DRIVER) and "Traceback (most recent call last)" in a.stderr_tail:
            crashed.append(f"service {a.process}")
            heading = f"--- service {a.process} (attempt {a.number}) stderr (tail) ---"
            shown.append(f"{heading}\n{a.stderr_tail.strip()}")
    if not crashed:
        return None
    quiet = "" if driver.stderr_tail.strip() else " (it wrote no stderr)"
    how = f"driver {driver.ended}{quiet}; {' and '.join(crashed)} logged a traceback"
    return how, "\n".join(shown)


def catalogue_has(catalogue: Sequence[CatalogueEntry], label: str) -> bool:
    """Is ``label`` (``before:x`` or ``api:before:x``) reached by some process of the catalogue?"""
    name, _, point = label.partition(":")
    return any(
        e.label == label
        or e.label.endswith(":" + label)
        or (e.label.startswith(name + "[") and e.label.endswith("]:" + point))
        for e in catalogue
    )
