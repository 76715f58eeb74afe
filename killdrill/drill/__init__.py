"""A drill: discover a command's kill points, then run cases that kill and resume it.

Data flow of one case (killdrill/ARCHITECTURE.md): a fresh workdir; attempt 1 armed with the schedule's
first kill; attempts 2..k resumed with the same thread id and workdir (the next kill,
or none); an optional between-attempts command; then the verdict of the case's ledger
against the baseline ledger of a clean run, and a report with a one-line reproduction.

A case also proves that it tested something: the kill landed where it was scheduled
(``point_not_reached`` otherwise, never a pass), and a resume that re-entered at the
very first boundary after progress had been made is flagged ``resumed_from_start``.

:class:`Drill` is built in layers, one module each: ``base`` (workdirs, launcher, launching
attempts), ``discovery``, ``case_verdict``, ``case``; ``options``, ``env`` and ``workdirs``
hold what they share.

Layer: above report and faults; may import every package below it (report, faults, verdict,
process, fakes, ledger, integrations, and the shared value modules), never chaos or a front end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import killdrill.report.drill  # noqa: F401  (installs how results render: CaseResult.text())
from killdrill.drill.case import CaseRunning
from killdrill.drill.errors import STATE_DIR, DiscoveryError, DrillOptions, UnknownPointError
from killdrill.errors import HarnessError
from killdrill.points import Schedule, parse_schedule
from killdrill.process.supervisor import clear_interrupt, interrupt_all
from killdrill.records import CaseResult, Discovery, DrillResult, ExactlyOnceViolation

__all__ = [
    "STATE_DIR",
    "CaseResult",
    "DiscoveryError",
    "Drill",
    "DrillOptions",
    "DrillResult",
    "ExactlyOnceViolation",
    "HarnessError",
    "UnknownPointError",
    "discover",
    "run",
]


class Drill(CaseRunning):
    """Drills one command.  ``discover()`` once, then ``run_case(schedule)`` per case.

    The command is a list (never run through a shell); ``{thread}`` and ``{workdir}`` are
    filled in each argument.
    """

    def __enter__(self) -> Drill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_all(
        self,
        schedules: Iterable[str] | None = None,
        *,
        on_case: Callable[[CaseResult], None] | None = None,
    ) -> DrillResult:
        """One case per catalogue point (or per schedule given); ``workers`` cases at once."""
        discovery = self.discover()
        todo = list(schedules) if schedules is not None else discovery.labels()
        for s in todo:
            self.check_schedule(parse_schedule(s))
        results: list[CaseResult | None] = [None] * len(todo)

        def one(i: int) -> None:
            result = results[i] = self.run_case(todo[i], check=False)
            if on_case is not None:
                on_case(result)

        if self.options.workers > 1:
            pool = ThreadPoolExecutor(self.options.workers)
            try:
                for f in [pool.submit(one, i) for i in range(len(todo))]:
                    f.result()
            except BaseException:
                # Ctrl-C, SIGTERM or a failed case: queued cases never start, running attempts die now.
                pool.shutdown(wait=False, cancel_futures=True)
                interrupt_all()
                pool.shutdown(wait=True)
                clear_interrupt()
                raise
            pool.shutdown()
        else:
            for i in range(len(todo)):
                one(i)
        return DrillResult(discovery=discovery, cases=tuple(r for r in results if r is not None))


def run(command: Sequence[str], schedule: str | Schedule | Sequence[str], **options: Any) -> CaseResult:
    """Discover ``command`` and run one case: ``killdrill.run(cmd, "during:payments.charge")``."""
    return Drill(command, **options).run_case(schedule)


def discover(command: Sequence[str], **options: Any) -> Discovery:
    """The kill-point catalogue and baseline ledger of a clean run of ``command``."""
    return Drill(command, **options).discover()
