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

Parts live in their own modules (re-exported here): :mod:`killdrill.strategies` (drawing),
:mod:`killdrill.shrink`, :mod:`killdrill.corpus`, :mod:`killdrill.chaos_report`,
:mod:`killdrill.chaos_pool`.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from killdrill.chaos_pool import Interrupted, WorkerPool, as_interrupted, interruptible
from killdrill.chaos_report import (
    CLEAN,
    ERRORED,
    MISSED,
    VIOLATED,
    RunRecord,
    chaos_counts,
    is_chaos_report,
    merge_reports,
    render_text,
    report_dict,
    spread,
    write_junit,
    write_reports,
)
from killdrill.corpus import CORPUS_VERSION, update_corpus
from killdrill.points import Schedule, parse_schedule
from killdrill.records import (
    HARNESS_ERROR,
    NOT_REACHED,
    POINT_NOT_REACHED,
    RESUME_FAILED,
    CaseResult,
    Discovery,
    Violation,
)
from killdrill.shrink import Shrunk, shrink
from killdrill.strategies import stratified_schedule

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
    "add_parser",
    "chaos_case",
    "chaos_counts",
    "is_chaos_report",
    "merge_reports",
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


# ---- schedules ---------------------------------------------------------------------------
def plan_schedule(
    discovery: Discovery, seed: int, index: int, *, min_kills: int = 1, max_kills: int = 3
) -> Schedule:
    """Run ``index`` of ``seed``: a function of these and the catalogue's labels alone, whatever
    other runs did and whatever the clean run's timings were (see ``stratified_schedule``)."""
    return stratified_schedule(discovery, seed, index, min_kills=min_kills, max_kills=max_kills)


def shard_indices(shard: tuple[int, int], runs: int | None) -> Iterator[int]:
    """Shard K/N takes runs K-1, K-1+N, ...: disjoint, and the N shards cover every run."""
    k, n = shard
    i = k - 1
    while runs is None or i < runs:
        yield i
        i += n


# ---- one random case -----------------------------------------------------------------------
def chaos_case(drill: Any, schedule: str | Schedule, *, seed: int | None = None) -> CaseResult:
    """Run one random case and judge it the chaos way: a kill that never landed is a miss.

    ``Drill.run_case`` rightly fails a named point that is not reached; a random offset past
    the end of a run is only a miss, and the run it left is judged like any completed run.
    An attempt that exits non-zero before its kill landed crashed on its own: resume_failed.
    """
    from killdrill.verdict import judge

    case = drill.run_case(schedule, seed=seed, check=False)
    sched = parse_schedule(case.schedule)
    missed = [
        v
        for v in case.violations
        if v.kind == POINT_NOT_REACHED and not _is_named(sched, int(v.detail.get("attempt", 0)))
    ]
    if not missed:
        return case
    violations = [v for v in case.violations if v not in missed]
    notes = list(case.notes)
    for v in missed:
        a = case.attempts[int(v.detail["attempt"]) - 1]
        if a.outcome == NOT_REACHED and a.returncode == 0:
            notes.append(f"kill missed: attempt {a.number} exited 0 before {a.kill} could land")
        else:
            violations.append(
                Violation(
                    RESUME_FAILED,
                    f"attempt {a.number} exited {a.returncode} on its own before its kill {a.kill} landed",
                    detail={"attempt": a.number, "returncode": a.returncode},
                )
            )
    if case.ledger is not None and not any(v.kind == HARNESS_ERROR for v in violations):
        discovery = drill.discover()
        violations.extend(
            judge(
                drill.baseline_for(case.schedule),
                case.ledger,
                case.attempts,
                identity=drill.options.identity,
                volatile=discovery.volatile,
                checks=drill.options.checks,
            )
        )
    result = replace(case, violations=tuple(violations), notes=tuple(notes))
    if result.ok and not drill.options.keep:
        shutil.rmtree(result.workdir, ignore_errors=True)
    return result


def _is_named(sched: Schedule, attempt: int) -> bool:
    kill = sched.for_attempt(attempt)
    return kill is not None and kill.is_named


# ---- the job -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ChaosOptions:
    """What ``killdrill chaos`` runs; every field has a flag of the same name."""

    seed: int
    runs: int | None = 100  # None: until the budget ends
    budget_s: float | None = None
    min_kills: int = 1
    max_kills: int = 3
    shard: tuple[int, int] = (1, 1)
    workers: int = 1
    report_dir: str | None = None
    regressions: str | None = None
    shrink: bool = True
    shrink_runs: int = 24
    max_failures: int | None = None  # stop the random phase after this many failing runs
    progress: bool | None = None  # None: a bar on a terminal, periodic lines otherwise
    net_faults: bool = False  # also draw drop:/reset: connection faults (killdrill.netfaults)


@dataclass
class ChaosResult:
    """Everything a chaos job ran, found and shrank; ``to_dict`` is ``report.json``."""

    options: ChaosOptions
    discovery: Discovery
    command: tuple[str, ...]
    runs: list[RunRecord] = field(default_factory=list)
    cases: list[CaseResult] = field(default_factory=list)
    failures: list[Shrunk] = field(default_factory=list)
    stopped: str = "runs"  # runs | budget | max_failures
    elapsed_s: float = 0.0

    @property
    def violated(self) -> bool:
        return any(r.outcome == VIOLATED for r in self.runs)

    @property
    def errored(self) -> bool:
        return any(r.outcome == ERRORED for r in self.runs)

    def exit_code(self) -> int:
        return 1 if self.violated else 2 if self.errored else 0

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return report_dict(
            {
                "seed": o.seed,
                "shard": f"{o.shard[0]}/{o.shard[1]}",
                "runs_planned": o.runs,
                "budget_s": o.budget_s,
                "kills": [o.min_kills, o.max_kills],
                "stopped": self.stopped,
                "elapsed_s": round(self.elapsed_s, 3),
                "command": list(self.command),
            },
            self.discovery,
            self.runs,
            self.cases,
            self.failures,
        )


class _Progress:
    """A tqdm bar on a terminal; a plain line every few seconds in CI logs."""

    def __init__(self, total: int | None, enabled: bool | None, every_s: float = 10.0) -> None:
        self.tty = sys.stderr.isatty() if enabled is None else enabled
        self.total, self.done, self.failed, self.missed = total, 0, 0, 0
        self.start = self.last = time.monotonic()
        self.every_s = every_s
        self.bar: Any = None
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True)

    def update(self, rec: RunRecord) -> None:
        self.done += 1
        self.failed += rec.outcome in (VIOLATED, ERRORED)
        self.missed += rec.missed
        if self.bar is not None:
            self.bar.set_postfix(failures=self.failed, missed=self.missed, refresh=False)
            self.bar.update(1)
            return
        now = time.monotonic()
        if now - self.last >= self.every_s or (self.total is not None and self.done == self.total):
            self.last = now
            elapsed = now - self.start
            of = f"/{self.total}" if self.total is not None else ""
            print(
                f"killdrill chaos: {self.done}{of} runs, {elapsed:.0f}s, "
                f"{self.done / max(elapsed, 1e-9):.2f} runs/s, "
                f"{self.failed} failure(s), "
                f"{self.missed} kill(s) missed (the run ended first: not a failure)",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_chaos(
    command: Sequence[str],
    drill_options: Any,
    options: ChaosOptions,
    *,
    discovery: Discovery | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> ChaosResult:
    """Discover once (or reuse ``discovery``), run the shard's random schedules on ``workers``
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
    drill_options: Any,
    options: ChaosOptions,
    *,
    discovery: Discovery | None,
    log: Callable[[str], None],
) -> ChaosResult:
    from killdrill.drill import Drill
    from killdrill.report import write_json

    started = time.monotonic()
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
    result = ChaosResult(options, discovery, tuple(command))
    deadline = phase_start + options.budget_s if options.budget_s is not None else None
    todo = shard_indices(options.shard, options.runs)
    total = (
        len(range(options.shard[0] - 1, options.runs, options.shard[1])) if options.runs is not None else None
    )
    progress = _Progress(total, options.progress)
    records: dict[int, tuple[RunRecord, CaseResult]] = {}
    failures = 0

    def plan(index: int) -> str:
        sched = plan_schedule(
            discovery, options.seed, index, min_kills=options.min_kills, max_kills=options.max_kills
        )
        if options.net_faults:
            from killdrill.netfaults import with_net_fault

            sched = with_net_fault(sched, discovery, options.seed, index)
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
        nonlocal failures
        rec = RunRecord.of(index, case, seconds)
        records[index] = (rec, case)
        failures += rec.outcome == VIOLATED
        progress.update(rec)

    def more() -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            result.stopped = "budget"
            return False
        if options.max_failures is not None and failures >= options.max_failures:
            result.stopped = "max_failures"
            return False
        return True

    def collect() -> None:
        for index in sorted(records):
            rec, case = records[index]
            result.runs.append(rec)
            result.cases.append(case)

    pool: WorkerPool | None = None
    try:
        if options.workers <= 1:
            for index in todo:
                if not more():
                    break
                t0 = time.monotonic()
                record(index, chaos_case(drill, plan(index), seed=options.seed), time.monotonic() - t0)
        else:
            pool = WorkerPool(options.workers, command, drill.options, discovery.to_dict())
            exhausted = False
            while True:
                while not exhausted and pool.idle and more():
                    index = next(todo, None)
                    if index is None:
                        exhausted = True
                        break
                    pool.submit(index, plan(index), options.seed)
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
        collect()
        result.stopped = f"interrupted by {stop.name}"
        result.elapsed_s = time.monotonic() - started
        if report is not None:
            write_reports(report, result.to_dict())
        stop.result = result  # type: ignore[attr-defined]
        raise stop from None
    finally:
        if pool is not None:
            pool.stop()
        progress.close()
        if plans is not None:
            plans.close()
    collect()
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
                write_reports(report, result.to_dict())
            stop.result = result  # type: ignore[attr-defined]
            raise stop from None
    result.elapsed_s = time.monotonic() - started
    if options.regressions and result.failures:
        update_corpus(options.regressions, command, result.failures, options.seed)
    if report is not None:
        write_reports(report, result.to_dict())
    return result


def _header(command: Sequence[str], options: ChaosOptions) -> dict[str, Any]:
    return {
        "seed": options.seed,
        "command": list(command),
        "shard": f"{options.shard[0]}/{options.shard[1]}",
        "runs": options.runs,
        "budget_s": options.budget_s,
        "kills": [options.min_kills, options.max_kills],
        "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def _shrink_all(
    drill: Any, result: ChaosResult, options: ChaosOptions, log: Callable[[str], None]
) -> list[Shrunk]:
    """Shrink the first run of each distinct set of kinds; identical minimal results are one failure."""
    seen_kinds: set[tuple[str, ...]] = set()
    out: dict[tuple[str, tuple[str, ...]], Shrunk] = {}
    for rec, case in zip(result.runs, result.cases, strict=True):
        if rec.outcome != VIOLATED or rec.kinds in seen_kinds:
            continue
        seen_kinds.add(rec.kinds)
        log(f"killdrill chaos: shrinking run {rec.index} [{rec.schedule}]: {', '.join(rec.kinds)}")
        s = shrink(drill, case, max_runs=options.shrink_runs, seed=options.seed, index=rec.index)
        log(f"killdrill chaos:   -> [{s.schedule}] after {s.runs} case(s)")
        out.setdefault((s.schedule, s.kinds), s)
    return list(out.values())


# ---- CLI ---------------------------------------------------------------------------------
def add_parser(sub: Any) -> None:
    """Register ``killdrill chaos`` with the CLI (called by ``killdrill.cli``)."""
    from killdrill.chaos_cli import add_parser as add

    add(sub)
