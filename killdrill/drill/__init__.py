"""A drill: discover a command's kill points, then run cases that kill and resume it.

Data flow of one case (killdrill/ARCHITECTURE.md): a fresh workdir; attempt 1 armed with the schedule's
first kill; attempts 2..k resumed with the same thread id and workdir (the next kill,
or none); an optional between-attempts command; then the verdict of the case's ledger
against the baseline ledger of a clean run, and a report with a one-line reproduction.

A case also proves that it tested something: the kill landed where it was scheduled
(``point_not_reached`` otherwise, never a pass), and a resume that re-entered at the
very first boundary after progress had been made is flagged ``resumed_from_start``.

:class:`Drill` is composed of parts, one module each, that share one ``DrillSetup``
(``base``: the command and options, workdirs, fork template, services, launching attempts): the ``Discoverer``
(``discovery``), the ``CaseJudge`` (``case_verdict``) and the ``CaseRunner`` (``case``);
``env`` and ``workdirs`` hold what they share.

Layer: above report and faults; may import every package below it (report, faults, verdict,
process, fakes, ledger, integrations, and the shared value modules), never chaos or a front end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from killdrill.drill.base import DrillSetup, TemplateSource
from killdrill.drill.case import CaseRunner
from killdrill.drill.case_verdict import CaseJudge
from killdrill.drill.discovery import Discoverer
from killdrill.drill.errors import STATE_DIR, DiscoveryError, UnknownPointError
from killdrill.drill.workdirs import Workdirs, unfinished_roots, workdirs_left_in_given_roots
from killdrill.errors import HarnessError
from killdrill.options import DrillOptions, override
from killdrill.options.reproduce import reproduce_line
from killdrill.points import Schedule, parse_schedule
from killdrill.process.supervisor import clear_interrupt, interrupt_all
from killdrill.records import CaseResult, Discovery, DrillResult, ExactlyOnceViolation, install_presenter
from killdrill.report.drill import PRESENTER

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
    "unfinished_roots",
    "workdirs_left_in_given_roots",
]

install_presenter(PRESENTER)  # the results this package makes render through the report


class Drill:
    """Drills one command.  ``discover()`` once, then ``run_case(schedule)`` per case.

    The command is a list (never run through a shell); ``{thread}`` and ``{workdir}`` are
    filled in each argument.
    """

    def __init__(self, command: Sequence[str], options: DrillOptions | None = None, **overrides: Any) -> None:
        # the overrides are keywords: a new options value, checked once (killdrill.options)
        self.setup = DrillSetup(command, override(options or DrillOptions(), overrides))
        self.command = self.setup.command
        self.options = self.setup.options
        self.workdirs: Workdirs = self.setup.workdirs
        self.discoverer = Discoverer(self.setup)
        self.judge = CaseJudge(self.discoverer)
        self.runner = CaseRunner(self.setup, self.discoverer, self.judge, self.reproduce_line)

    def __enter__(self) -> Drill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def root(self) -> Path:
        """Where workdirs go (see :class:`~killdrill.drill.workdirs.Workdirs`)."""
        return self.workdirs.root

    def close(self) -> None:
        """Stop the fork template and the integrations' services; remove an empty root we made."""
        self.setup.close()

    def share_templates(self, source: TemplateSource) -> None:
        """Fork attempts from the templates ``source`` keeps (a pytest session's pool)."""
        self.setup.share_templates(source)

    def discover(self, *, force: bool = False) -> Discovery:
        """The kill-point catalogue and baseline (clean runs, once; see :class:`Discoverer`)."""
        return self.discoverer.discover(force=force)

    def use_discovery(self, discovery: Discovery) -> None:
        """Reuse a discovery made earlier (the pytest plugin caches it across sessions)."""
        self.discoverer.use_discovery(discovery)

    def points(self) -> list[str]:
        """The catalogue's labels, in the order a clean run reached them."""
        return self.discoverer.points()

    def check_schedule(self, schedule: Schedule) -> None:
        """The first named kill must be in the catalogue (``UnknownPointError`` lists it)."""
        self.discoverer.check_schedule(schedule)

    def reproduce_line(self, schedule: str) -> str:
        """``killdrill run`` of this case (:func:`killdrill.options.reproduce.reproduce_line`)."""
        return reproduce_line(self.command, self.options, schedule, self.setup.option_rows)

    def run_case(
        self,
        schedule: str | Schedule | Sequence[str],
        *,
        seed: int | None = None,
        check: bool = True,
        offsets_may_miss: bool = False,
    ) -> CaseResult:
        """Run one case.  ``check=False`` skips the catalogue check (random chaos schedules);
        ``offsets_may_miss``: a random offset the run ended before is a miss (chaos)."""
        return self.runner.run_case(schedule, seed=seed, check=check, offsets_may_miss=offsets_may_miss)

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
