"""Concurrent resume: N resumers of one thread, run in lockstep at every boundary.

Two workers resuming the same thread at once is the hardest bug of the field (a claim
that reads, then inserts; a checkpoint both believe they own).  Left to chance, the race
window is hit rarely; here every boundary is a barrier: each resumer is held at a point
until every live resumer has arrived at the same point (or exited), then all go on
together.  ``point`` limits the barrier to one point.  A barrier that not all resumers
reach in time (one of them blocked on a lock, say) is released anyway, and the report says
so, rather than hanging the case.  In time: ``patience_s``, or, if longer, as long as the
first to arrive took to get there since the resumers were last together (their start, or the
barrier that let it go last): resumers started together on a loaded machine (or spawned,
importing a framework for a second) arrive that far apart, and a barrier given up too early
lets one resumer finish before the other looks (the race the drill exists to provoke,
missed).  Counted from the last release, not from the start, so that a resumer held at every
boundary by one that is blocked waits ``patience_s`` at each, not ever longer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from killdrill.faults.kinds import Batch, Scene, act
from killdrill.points import Fault
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Nemesis, fault_armed_at
from killdrill.records import TraceEvent

Maker = Callable[[int, Fault | None, str], LaunchSpec]
"""The spec of attempt ``number`` armed with a fault, its log files' suffix (``.2``) last."""


@dataclass(eq=False)
class Barrier(Nemesis):
    """The lockstep of the resumers launched together (every launch of its step)."""

    point: str | None = None
    patience_s: float = 1.0
    waiting: dict[str, list[tuple[Running, Connection]]] = field(default_factory=dict)
    released: int = 0
    _together: dict[int, float] = field(default_factory=dict)  # id(run) -> when it was last let go

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        return AtPoints.WAIT  # every resumer waits at every point: the barrier answers late

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        if self.point is not None and event.point != self.point:
            return False
        if fault_armed_at(run, event):
            return False  # the scheduled kill of this resumer takes precedence
        label = event.label
        first = label not in self.waiting
        self.waiting.setdefault(label, []).append((run, conn))
        if first and self.stage is not None:
            since = self._together.get(id(run), run.started)
            patience = max(self.patience_s, time.monotonic() - since)
            self.stage.at(patience, lambda: self._give_up(label, patience))
        self._check(label)
        return True

    def on_exit(self, run: Running) -> None:
        for label in list(self.waiting):
            self._check(label)

    def _live(self) -> list[Running]:
        return [r for r in self.bound().running if r.alive and r.outcome is None]

    def _check(self, label: str) -> None:
        arrived = {id(r) for r, _ in self.waiting.get(label, ())}
        if arrived and all(id(r) in arrived for r in self._live()):
            self._release(label)

    def _give_up(self, label: str, patience: float) -> None:
        if label in self.waiting:
            for run, _ in self.waiting[label]:
                run.notes.append(f"barrier at {label} released after {patience:.3g}s: not every resumer came")
            self._release(label)

    def _release(self, label: str) -> None:
        stage = self.bound()
        now = time.monotonic()
        for run, conn in self.waiting.pop(label, ()):
            stage.release(run, conn)
            self._together[id(run)] = now
        self.released += 1


def resumers(
    number: int, fault: Fault | None, count: int, point: str | None, make: Maker, scene: Scene
) -> Batch:
    """``count`` resumers numbered ``number`` at once (the first armed with ``fault``), held at
    barriers; the barrier is asked first, the first resumer's own fault goes before it."""
    specs = [make(number, fault if i == 0 else None, f".{i + 1}") for i in range(count)]
    return Batch(specs, [Barrier(point), *act(fault, specs[0], scene)])
