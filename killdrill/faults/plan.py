"""A case's plan: what each step of its one launch loop starts, and the nemeses acting on it.

The schedule's faults say it by their kinds (``faults.kinds.step``: one launch armed with its
fault, or a zombie and its deferred resumer); ``--resumers N`` makes attempt 2 the N concurrent
resumers held at barriers (``faults.resumers``).  The case runner asks ``step(number)`` and
launches what it gets, whatever it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from killdrill.faults import kinds
from killdrill.faults.kinds import Batch, Scene
from killdrill.faults.resumers import Maker, resumers
from killdrill.points import Fault, Schedule
from killdrill.process.attempts import LaunchSpec
from killdrill.records import Attempt


@dataclass
class Plan:
    """The steps of one case: ``schedule``'s faults, ``resumers`` resuming attempt 2 together
    (held at every point, or at ``barrier`` only), ``make`` building each launch's spec."""

    schedule: Schedule
    make: Maker
    scene: Scene
    resumers: int = 1
    barrier: str | None = None

    def step(self, number: int) -> Batch:
        """What attempt ``number`` launches (``Batch.numbers``: the attempt numbers it uses)."""
        if number == 2 and self.resumers > 1:
            fault = self.schedule.for_attempt(number)
            return resumers(number, fault, self.resumers, self.barrier, self.make, self.scene)
        return kinds.step(self.schedule, number, self._one, self.scene)

    def whole(self, attempts: Sequence[Attempt]) -> None:
        """None: a step of this plan is one step of the case, not the whole of it."""
        return None

    def _one(self, number: int, fault: Fault | None) -> LaunchSpec:
        return self.make(number, fault, "")
