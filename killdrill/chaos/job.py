"""``killdrill chaos``: many random kill schedules, shrunk failures, a regression corpus.

Named kill points prove the boundaries someone thought of; random kills find the others.
Run *i* of seed *S* is always the same schedule, written in timing-free coordinates (a
boundary interval and a percentage of it: ``after:charge_customer+37.5%``), so the seed
alone fixes every schedule's text on any machine, shards are disjoint slices of one seed's
runs, and workers cannot change what runs.  Kills are dealt round-robin over the intervals:
every interval gets a kill before any gets a second.  A random kill that does not land (the
attempt exited first) is a "kill missed", not a failure.  Each distinct failure is shrunk
with Hypothesis to fewer kills on named boundaries and appended to a regression corpus the
pytest plugin replays.

The seed, the job's header and each run's plan (with its reproduction command) reach the
report folder before the run starts, so a crashed job or a CI timeout still leaves every
reproduction behind.  SIGINT / SIGTERM stop the job within about a second: every attempt is
killed, the workers are stopped, the reports of the runs so far are written, exit 130 / 143.

Parts live in their own modules (re-exported here): :mod:`killdrill.chaos.strategies` (drawing),
:mod:`killdrill.chaos.shrink`, :mod:`killdrill.chaos.corpus`, :mod:`killdrill.chaos.report`,
:mod:`killdrill.chaos.pool`.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from killdrill.chaos.case import chaos_case, plan_schedule, shard_indices
from killdrill.chaos.corpus import CORPUS_VERSION, update_corpus
from killdrill.chaos.options import CHAOS_OPTIONS, CHAOS_RULES, CHAOS_UPGRADE
from killdrill.chaos.pool import Interrupted, WorkerPool, as_interrupted, interruptible
from killdrill.chaos.progress import ChaosProgress
from killdrill.chaos.report import (
    CLEAN,
    ERRORED,
    MISSED,
    VIOLATED,
    RunRecord,
    chaos_counts,
    is_chaos_report,
    render_text,
    report_dict,
    spread,
    write_junit,
    write_reports,
)
from killdrill.chaos.shrink import Shrunk, shrink
from killdrill.chaos.stream import RunStream, merged_reports, write_json_stream
from killdrill.drill import Drill, DrillOptions
from killdrill.errors import ExitCode
from killdrill.faults import fleet
from killdrill.faults.network import restartable, with_dependency_fault, with_net_fault
from killdrill.faults.powerloss import check_power_loss, with_power_loss
from killdrill.options import (
    OPTIONS,
    Spelled,
    Spelling,
    check_values,
    spelled_fields,
)
from killdrill.records import (
    CaseResult,
    Discovery,
)
from killdrill.report.drill import write_json

__all__ = [
    "CLEAN",
    "CORPUS_VERSION",
    "ERRORED",
    "MISSED",
    "VIOLATED",
    "ChaosOptions",
    "ChaosResult",
    "Interrupted",
    "RunRecord",
    "Shrunk",
    "chaos_case",
    "chaos_counts",
    "is_chaos_report",
    "merged_reports",
    "plan_schedule",
    "render_text",
    "run_chaos",
    "shard_indices",
    "shrink",
    "spread",
    "update_corpus",
    "write_junit",
    "write_reports",
]


# ---- the job -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ChaosOptions:
    """What ``killdrill chaos`` runs.  Every field has a row in ``killdrill.chaos.options.CHAOS_OPTIONS``,
    the command line's flags are derived from them (``--budget`` is ``budget_s``, ``--kills
    MIN..MAX`` is ``min_kills``/``max_kills``, ``--report`` is ``report_dir``, ``--no-shrink``
    turns ``shrink`` off; ``progress`` has none), and each value is checked here by its row's kind."""

    seed: int
    runs: int | None = 100  # None: until the budget ends
    budget_s: float | None = None
    min_kills: int = 1
    max_kills: int = 3
    shard: tuple[int, int] = (1, 1)
    processes: int = 1  # worker processes (a drill's `workers` are threads of one process)
    report_dir: str | None = None
    regressions: str | None = None
    shrink: bool = True
    shrink_runs: int = 24
    max_failures: int | None = None  # stop the random phase after this many failing runs
    progress: bool | None = None  # None: a bar on a terminal, periodic lines otherwise
    # also "pause", "upgrade" (killdrill.faults.fleet), "net", "deps" (faults.network), "power"
    faults: tuple[str, ...] = ("kill",)
    # How the caller named the fields (for messages only: not an option, not compared).
    spelled: Spelled = field(default=Spelling.KEYWORD, compare=False, repr=False)

    def __post_init__(self) -> None:
        """The one check of a chaos job's options (killdrill.options.check_values)."""
        check_values(self, CHAOS_OPTIONS, CHAOS_RULES, self.spelled)


@dataclass
class ChaosResult:
    """Everything a chaos job ran, found and shrank; ``to_dict`` is ``report.json``."""

    options: ChaosOptions
    discovery: Discovery
    command: tuple[str, ...]
    runs: Sequence[RunRecord] = field(default_factory=list)  # a job's: read from its RunStream
    cases: Sequence[CaseResult] = field(default_factory=list)
    failures: list[Shrunk] = field(default_factory=list)
    stopped: str = "runs"  # runs | budget | max_failures
    elapsed_s: float = 0.0
    stream: RunStream | None = field(default=None, compare=False, repr=False)

    @property
    def violated(self) -> bool:
        if self.stream is not None:
            return self.stream.violations > 0
        return any(r.outcome == VIOLATED for r in self.runs)

    @property
    def errored(self) -> bool:
        if self.stream is not None:
            return self.stream.errors > 0
        return any(r.outcome == ERRORED for r in self.runs)

    def exit_code(self) -> int:
        return ExitCode.VIOLATION if self.violated else ExitCode.ERROR if self.errored else ExitCode.OK

    def header(self) -> dict[str, Any]:
        o = self.options
        return {
            "seed": o.seed,
            "shard": f"{o.shard[0]}/{o.shard[1]}",
            "runs_planned": o.runs,
            "budget_s": o.budget_s,
            "kills": [o.min_kills, o.max_kills],
            "stopped": self.stopped,
            "elapsed_s": round(self.elapsed_s, 3),
            "command": list(self.command),
        }

    def to_dict(self) -> dict[str, Any]:
        """``report.json``'s value, whole in memory (a job writes its files with :meth:`data`)."""
        return report_dict(self.header(), self.discovery, self.runs, self.cases, self.failures)

    def data(self) -> Mapping[str, Any]:
        """:meth:`to_dict` with its runs and cases read from disk as they are used (a job's)."""
        if self.stream is None:
            return self.to_dict()
        return self.stream.report_parts(self.header(), self.failures)

    def write_reports(self, folder: str | os.PathLike[str]) -> None:
        """``report.json``, ``junit.xml``, ``report.html``; a job's streamed from its runs' file."""
        if self.stream is None:
            write_reports(folder, self.to_dict())
        else:
            self.stream.write_reports(Path(folder), self.header(), self.failures)

    def write_json(self, path: str | os.PathLike[str]) -> None:
        if self.stream is None:
            write_json(path, self.to_dict())
        else:
            write_json_stream(Path(path), self.data())


def run_chaos(
    command: Sequence[str],
    drill_options: DrillOptions,
    options: ChaosOptions,
    *,
    discovery: Discovery | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> ChaosResult:
    """Discover once (or reuse ``discovery``), run the shard's random schedules on ``processes``
    processes, shrink each distinct failure, write the corpus and the reports.

    SIGINT / SIGTERM (from the main thread) raise :class:`Interrupted` after every attempt
    and worker is stopped and the reports of the runs so far are written; its ``result``
    holds them.
    """
    with interruptible():
        try:
            return _run_chaos(command, drill_options, options, discovery=discovery, log=log)
        except BaseException as exc:
            stop = as_interrupted(exc)
            if stop is None or stop is exc:
                raise
            raise stop from None


def _run_chaos(
    command: Sequence[str],
    drill_options: DrillOptions,
    options: ChaosOptions,
    *,
    discovery: Discovery | None,
    log: Callable[[str], None],
) -> ChaosResult:
    started = time.monotonic()
    spelled = {**spelled_fields(drill_options, OPTIONS), **spelled_fields(options, CHAOS_OPTIONS)}
    CHAOS_UPGRADE.check(
        {"faults": options.faults, "resume_with": drill_options.resume_with},
        spelled,
        (*OPTIONS, *CHAOS_OPTIONS),
    )
    if "power" in options.faults:
        check_power_loss()  # one line before any run, not a harness error in every other one
    drill = Drill(command, drill_options)
    if discovery is not None:
        drill.use_discovery(discovery)
    discovery = drill.discover()
    phase_start = time.monotonic()  # the budget is the random phase's: discovery comes first
    report = Path(options.report_dir) if options.report_dir else None
    plans = None
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
        write_json(report / "chaos.json", {**_header(command, options), "discovery": discovery.to_dict()})
        plans = (report / "plans.jsonl").open("a", encoding="utf-8")
    stream = RunStream(discovery, report)  # runs.jsonl: each run as it finishes
    result = ChaosResult(options, discovery, tuple(command), stream=stream)
    result.runs, result.cases = stream.runs(), stream.cases()
    deadline = phase_start + options.budget_s if options.budget_s is not None else None
    todo = shard_indices(options.shard, options.runs)
    total = (
        len(range(options.shard[0] - 1, options.runs, options.shard[1])) if options.runs is not None else None
    )
    progress = ChaosProgress(total, options.progress)

    def plan(index: int) -> str:
        sched = plan_schedule(
            discovery, options.seed, index, min_kills=options.min_kills, max_kills=options.max_kills
        )
        sched = fleet.draw_faults(sched, discovery.labels(), options.seed, index, options.faults)
        if "net" in options.faults:
            sched = with_net_fault(sched, discovery, options.seed, index)
        if "power" in options.faults:
            sched = with_power_loss(sched, options.seed, index)
        if "deps" in options.faults:
            services, proxies = restartable(drill_options, drill.setup.services()), list(drill_options.proxy)
            sched = with_dependency_fault(sched, discovery, options.seed, index, services, proxies)
        text = str(sched)
        if plans is not None:  # before the run starts: a crash still leaves the reproduction
            line = {
                "index": index,
                "seed": options.seed,
                "schedule": text,
                "reproduce": drill.reproduce_line(text),
            }
            plans.write(json.dumps(line) + "\n")
            plans.flush()
            os.fsync(plans.fileno())
        return text

    def record(index: int, case: CaseResult, seconds: float) -> None:
        rec = RunRecord.of(index, case, seconds)
        stream.add(rec, case)  # on disk now; in memory only if it failed
        progress.update(rec)

    def more() -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            result.stopped = "budget"
            return False
        if options.max_failures is not None and stream.violations >= options.max_failures:
            result.stopped = "max_failures"
            return False
        return True

    pool: WorkerPool | None = None
    try:
        if options.processes <= 1:
            for index in todo:
                if not more():
                    break
                t0 = time.monotonic()
                record(index, chaos_case(drill, plan(index), seed=options.seed), time.monotonic() - t0)
        else:
            pool = WorkerPool(options.processes, command, drill.options, discovery.to_dict())
            exhausted = False
            while True:
                while not exhausted and pool.idle and more():
                    upcoming = next(todo, None)
                    if upcoming is None:
                        exhausted = True
                        break
                    pool.submit(upcoming, plan(upcoming), options.seed)
                if not pool.busy:
                    break
                for index, data, seconds in pool.results():
                    record(index, CaseResult.from_dict(data), seconds)
                if not more():
                    exhausted = True  # runs in flight finish; none start
            pool.close()
    except BaseException as exc:
        stop = as_interrupted(exc)
        if stop is None:
            raise
        if pool is not None:
            pool.stop()  # every worker unwinds (killing its attempt) or is SIGKILLed within ~1 s
        progress.close()
        result.stopped = f"interrupted by {stop.name}"
        result.elapsed_s = time.monotonic() - started
        if report is not None:
            result.write_reports(report)
        stop.result = result
        raise stop from None
    finally:
        if pool is not None:
            pool.stop()
        progress.close()
        if plans is not None:
            plans.close()
    if options.shrink:
        try:
            result.failures = _shrink_all(drill, result, options, log)
        except BaseException as exc:  # interrupted: the random phase is done, report it unshrunk
            stop = as_interrupted(exc)
            if stop is None:
                raise
            result.stopped = f"interrupted by {stop.name} while shrinking"
            result.elapsed_s = time.monotonic() - started
            if report is not None:
                result.write_reports(report)
            stop.result = result
            raise stop from None
    result.elapsed_s = time.monotonic() - started
    if options.regressions and result.failures:
        update_corpus(options.regressions, command, result.failures, options.seed)
    if report is not None:
        result.write_reports(report)
    return result


def _header(command: Sequence[str], options: ChaosOptions) -> dict[str, Any]:
    return {
        "seed": options.seed,
        "command": list(command),
        "shard": f"{options.shard[0]}/{options.shard[1]}",
        "runs": options.runs,
        "budget_s": options.budget_s,
        "kills": [options.min_kills, options.max_kills],
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _shrink_all(
    drill: Drill, result: ChaosResult, options: ChaosOptions, log: Callable[[str], None]
) -> list[Shrunk]:
    """Shrink the first run of each distinct set of kinds; identical minimal results are one failure."""
    seen_kinds: set[tuple[str, ...]] = set()
    out: dict[tuple[str, tuple[str, ...]], Shrunk] = {}
    failing = (
        [result.stream.failing[i] for i in sorted(result.stream.failing)]
        if result.stream is not None
        else list(zip(result.runs, result.cases, strict=True))
    )
    for rec, case in failing:
        if rec.outcome != VIOLATED or rec.kinds in seen_kinds:
            continue
        seen_kinds.add(rec.kinds)
        log(f"killdrill chaos: shrinking run {rec.index} [{rec.schedule}]: {', '.join(rec.kinds)}")
        s = shrink(drill, case, max_runs=options.shrink_runs, seed=options.seed, index=rec.index)
        log(f"killdrill chaos:   -> [{s.schedule}] after {s.runs} case(s)")
        out.setdefault((s.schedule, s.kinds), s)
    return list(out.values())
