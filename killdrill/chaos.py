"""``killdrill chaos``: many random kill schedules, shrunk failures, a regression corpus.

Named kill points prove the boundaries someone thought of; random kills find the others.
Run *i* of seed *S* is always the same schedule (drawn from its own ``random.Random``),
so shards are disjoint slices of one seed's runs and parallel workers cannot change what
runs.  A random kill that does not land (the attempt exited before the offset) is a
"kill missed", not a failure.  Each distinct failure is shrunk with Hypothesis to fewer
kills on named boundaries and appended to a regression corpus the pytest plugin replays.

The seed, the job's header and each run's plan reach the report folder before the run
starts, so a crashed job or a CI timeout still leaves every reproduction behind.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

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
from killdrill.strategies import START, interval_of, random_schedule

__all__ = [
    "ChaosOptions",
    "ChaosResult",
    "RunRecord",
    "Shrunk",
    "add_parser",
    "chaos_case",
    "merge_reports",
    "plan_schedule",
    "run_chaos",
    "shard_indices",
    "shrink",
    "update_corpus",
]

CLEAN, VIOLATED, MISSED, ERRORED = "clean", "violated", "missed", "harness_error"
"""Run outcomes: exactly-once with a kill landed; a violation; no kill landed; harness error."""

CORPUS_VERSION = 1


# ---- schedules ---------------------------------------------------------------------------
def plan_schedule(
    discovery: Discovery, seed: int, index: int, *, min_kills: int = 1, max_kills: int = 3
) -> Schedule:
    """Run ``index`` of ``seed``: a function of these alone, whatever other runs did."""
    rng = random.Random(f"killdrill-chaos:{seed}:{index}")
    return random_schedule(discovery, rng, min_kills=min_kills, max_kills=max_kills)


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
            )
        )
    result = replace(case, violations=tuple(violations), notes=tuple(notes))
    if result.ok and not drill.options.keep:
        shutil.rmtree(result.workdir, ignore_errors=True)
    return result


def _is_named(sched: Schedule, attempt: int) -> bool:
    kill = sched.for_attempt(attempt)
    return kill is not None and kill.is_named


def _landed(case: CaseResult) -> list[str]:
    return [iv for a in case.attempts if (iv := interval_of(a)) is not None]


@dataclass(frozen=True)
class RunRecord:
    """One random run: its index in the seed's sequence, its schedule and what happened."""

    index: int
    schedule: str
    outcome: str
    kinds: tuple[str, ...]
    landed: tuple[str, ...]  # interval (boundary label or START) of each kill that landed
    missed: int  # kills scheduled for attempts that ran but did not land
    seconds: float

    @classmethod
    def of(cls, index: int, case: CaseResult, seconds: float) -> RunRecord:
        landed = tuple(_landed(case))
        ran = min(len(parse_schedule(case.schedule)), len(case.attempts))
        missed = sum(1 for n in case.notes if n.startswith("kill missed:"))
        if HARNESS_ERROR in case.kinds:
            outcome = ERRORED
        elif not case.ok:
            outcome = VIOLATED
        elif not landed:
            outcome = MISSED
        else:
            outcome = CLEAN
        return cls(
            index,
            case.schedule,
            outcome,
            tuple(sorted(case.kinds)),
            landed,
            min(missed, ran),
            round(seconds, 3),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "schedule": self.schedule,
            "outcome": self.outcome,
            "kinds": list(self.kinds),
            "landed": list(self.landed),
            "missed": self.missed,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        return cls(
            d["index"],
            d["schedule"],
            d["outcome"],
            tuple(d["kinds"]),
            tuple(d["landed"]),
            d["missed"],
            d["seconds"],
        )


# ---- shrinking -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Shrunk:
    """A failure reduced to a minimal schedule that still shows the same violation kinds."""

    schedule: str
    kinds: tuple[str, ...]
    original: str
    index: int | None
    reproduce: str
    runs: int  # cases run while shrinking
    case: CaseResult | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "kinds": list(self.kinds),
            "original": self.original,
            "index": self.index,
            "reproduce": self.reproduce,
            "shrink_runs": self.runs,
            "case": self.case.to_dict() if self.case else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Shrunk:
        case = CaseResult.from_dict(d["case"]) if d.get("case") else None
        return cls(
            d["schedule"],
            tuple(d["kinds"]),
            d["original"],
            d.get("index"),
            d["reproduce"],
            d["shrink_runs"],
            case,
        )


def _candidates(discovery: Discovery, case: CaseResult) -> list[list[str]]:
    """Per kill: named boundaries it could move to (the step's provider call, where it landed,
    the next boundary), then the kill itself.

    ``sampled_from``-like indices shrink towards 0, so the named points are tried first.
    """
    labels = discovery.labels()
    out: list[list[str]] = []
    for number, kill in enumerate(parse_schedule(case.schedule), 1):
        options: list[str] = []
        if not kill.is_named and number <= len(case.attempts):
            where = interval_of(case.attempts[number - 1])
            if where == START:
                options.append(labels[0])
            elif where is not None:
                options.extend(_during_before(labels, where))
                options.append(where)
                if where in labels and labels.index(where) + 1 < len(labels):
                    options.append(labels[labels.index(where) + 1])
        options.append(str(kill))
        out.append(list(dict.fromkeys(options)))
    return out


def _during_before(labels: Sequence[str], where: str) -> list[str]:
    """The provider call nearest before ``where`` in the same step: "the provider did it, the
    caller never heard" explains a lost response best, so it is the first place to try."""
    if where not in labels:
        return []
    for label in reversed(labels[: labels.index(where) + 1]):
        if label.startswith("during:"):
            return [label]
        if label.startswith("before:"):
            break
    return []


def shrink(
    drill: Any, case: CaseResult, *, max_runs: int = 24, seed: int = 0, index: int | None = None
) -> Shrunk:
    """Shrink a failing case with Hypothesis's engine to the simplest schedule showing its kinds.

    The failing choice sequence is seeded into an in-memory example database, so the
    shrinker starts from it: dropping kills (``False`` is simpler) and moving each kill to
    a named boundary (index 0 is simpler) are tried, each verified by a real case.  Answers
    are memoised per schedule, so timing noise cannot make the engine see a flaky test.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, find, settings
    from hypothesis import strategies as st
    from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes
    from hypothesis.errors import NoSuchExample

    target = tuple(sorted(case.kinds))
    cands = _candidates(drill.discover(), case)
    memo: dict[str, tuple[str, ...]] = {case.schedule: target, "none": ()}
    cases: dict[str, CaseResult] = {case.schedule: case}
    ran = 0

    def text_of(choice: Sequence[tuple[bool, int]]) -> str:
        return ",".join(c[i] for (keep, i), c in zip(choice, cands, strict=True) if keep) or "none"

    def reproduces(choice: Sequence[tuple[bool, int]]) -> bool:
        nonlocal ran
        text = text_of(choice)
        if text not in memo:
            if ran >= max_runs:
                return False
            ran += 1
            tried = chaos_case(drill, text, seed=seed)
            memo[text] = tuple(sorted(tried.kinds))
            cases[text] = tried
        return set(memo[text]) >= set(target)  # every kind of the find shows again

    # First, deterministically, move each kill to the first named boundary that keeps the
    # failure: that is the step users care most about, so it must not depend on the order in
    # which the engine explores (or on the run budget running out first).
    current = [(True, len(c) - 1) for c in cands]
    for i, c in enumerate(cands):
        for j in range(len(c) - 1):
            trial = [*current[:i], (True, j), *current[i + 1 :]]
            if reproduces(trial):
                current = trial
                break
    strategy = st.tuples(*(st.tuples(st.booleans(), st.integers(0, len(c) - 1)) for c in cands))
    db = InMemoryExampleDatabase()
    key = b"killdrill-shrink"
    start = tuple(x for pair in current for x in pair)
    db.save(key + b".secondary", choices_to_bytes(start))  # secondary: "not shrunk yet"
    try:
        best = find(
            strategy,
            reproduces,
            settings=settings(
                database=db,
                phases=[Phase.reuse, Phase.shrink],
                deadline=None,
                verbosity=Verbosity.quiet,
                suppress_health_check=list(HealthCheck),
            ),
            database_key=key,
        )
    except NoSuchExample:  # the engine could not replay the start: keep the greedy result
        best = tuple(current)
    text = text_of(best)
    return Shrunk(text, target, case.schedule, index, drill.reproduce_line(text), ran, cases.get(text))


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
        return _report_dict(
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


def _report_dict(
    header: dict[str, Any],
    discovery: Discovery,
    runs: Sequence[RunRecord],
    cases: Sequence[CaseResult],
    failures: Sequence[Shrunk],
) -> dict[str, Any]:
    from killdrill.report import summarize_cases

    summary = summarize_cases(cases)
    summary.update(chaos_counts(runs))
    return {
        "chaos": header,
        "discovery": discovery.to_dict(),
        "runs": [r.to_dict() for r in runs],
        "cases": [c.to_dict() for c in cases],
        "spread": spread(discovery, runs),
        "failures": [f.to_dict() for f in failures],
        "summary": summary,
    }


def chaos_counts(runs: Sequence[RunRecord]) -> dict[str, int]:
    counts = {CLEAN: 0, VIOLATED: 0, MISSED: 0, ERRORED: 0}
    for r in runs:
        counts[r.outcome] += 1
    return {
        "runs": len(runs),
        "runs_clean": counts[CLEAN],
        "runs_violated": counts[VIOLATED],
        "runs_without_kill": counts[MISSED],
        "runs_harness_error": counts[ERRORED],
        "kills_landed": sum(len(r.landed) for r in runs),
        "kills_missed": sum(r.missed for r in runs),
    }


def spread(discovery: Discovery, runs: Sequence[RunRecord]) -> dict[str, dict[str, int]]:
    """Interval (from this boundary to the next) -> kills landed there, and in violated runs."""
    out = {START: {"kills": 0, "violated": 0}}
    out.update({label: {"kills": 0, "violated": 0} for label in discovery.labels()})
    for r in runs:
        for iv in r.landed:
            row = out.setdefault(iv, {"kills": 0, "violated": 0})
            row["kills"] += 1
            row["violated"] += r.outcome == VIOLATED
    return out


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


# Worker processes: each builds its own Drill and reuses the parent's discovery.
_WORKER: Any = None


def _worker_init(command: Sequence[str], options: Any, discovery: dict[str, Any]) -> None:
    global _WORKER
    from killdrill.drill import Drill

    if options.root is not None:
        options = replace(options, root=os.path.join(str(options.root), f"worker-{os.getpid()}"))
    _WORKER = Drill(command, options)
    _WORKER.use_discovery(Discovery.from_dict(discovery))


def _worker_run(index: int, schedule: str, seed: int) -> tuple[int, dict[str, Any], float]:
    t0 = time.monotonic()
    case = chaos_case(_WORKER, schedule, seed=seed)
    return index, case.to_dict(), time.monotonic() - t0


def run_chaos(
    command: Sequence[str],
    drill_options: Any,
    options: ChaosOptions,
    *,
    discovery: Discovery | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> ChaosResult:
    """Discover once (or reuse ``discovery``), run the shard's random schedules on ``workers``
    processes, shrink each distinct failure, write the corpus and the reports."""
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
        text = str(
            plan_schedule(
                discovery, options.seed, index, min_kills=options.min_kills, max_kills=options.max_kills
            )
        )
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

    try:
        if options.workers <= 1:
            for index in todo:
                if not more():
                    break
                t0 = time.monotonic()
                record(index, chaos_case(drill, plan(index), seed=options.seed), time.monotonic() - t0)
        else:
            with ProcessPoolExecutor(
                options.workers,
                mp_context=get_context("spawn"),
                initializer=_worker_init,
                initargs=(tuple(command), drill.options, discovery.to_dict()),
            ) as pool:
                pending: set[Future[tuple[int, dict[str, Any], float]]] = set()
                exhausted = False
                while True:
                    while not exhausted and len(pending) < options.workers and more():
                        index = next(todo, None)
                        if index is None:
                            exhausted = True
                            break
                        pending.add(pool.submit(_worker_run, index, plan(index), options.seed))
                    if not pending:
                        break
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        index, data, seconds = fut.result()
                        record(index, CaseResult.from_dict(data), seconds)
                    if exhausted and not pending:
                        break
                    if not more():
                        exhausted = True  # runs in flight finish; none start
    finally:
        progress.close()
        if plans is not None:
            plans.close()
    for index in sorted(records):
        rec, case = records[index]
        result.runs.append(rec)
        result.cases.append(case)
    if options.shrink:
        result.failures = _shrink_all(drill, result, options, log)
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


# ---- regression corpus -----------------------------------------------------------------------
def update_corpus(
    path: str | os.PathLike[str], command: Sequence[str], failures: Sequence[Shrunk], seed: int
) -> int:
    """Append new (command, schedule, kinds) entries; sorted, so a diff shows only what is new.

    Format: ``{"version": 1, "regressions": [{"command", "schedule", "kinds", "seed", "found"}]}``.
    Returns how many entries were added.
    """
    from killdrill.report import write_json

    p = Path(path)
    data: dict[str, Any] = {"version": CORPUS_VERSION, "regressions": []}
    if p.exists() and p.read_text(encoding="utf-8").strip():
        data = json.loads(p.read_text(encoding="utf-8"))
        if data.get("version") != CORPUS_VERSION or not isinstance(data.get("regressions"), list):
            raise ValueError(f"{p} is not a killdrill regression corpus (version {CORPUS_VERSION})")

    def ident(e: Mapping[str, Any]) -> tuple[Any, ...]:
        return (list(e["command"]), e["schedule"], sorted(e["kinds"]))

    known = {json.dumps(ident(e)) for e in data["regressions"]}
    today = _dt.datetime.now(_dt.UTC).date().isoformat()
    added = 0
    for f in failures:
        entry = {
            "command": list(command),
            "schedule": f.schedule,
            "kinds": sorted(f.kinds),
            "seed": seed,
            "found": today,
        }
        if json.dumps(ident(entry)) not in known:
            known.add(json.dumps(ident(entry)))
            data["regressions"].append(entry)
            added += 1
    data["regressions"].sort(key=lambda e: json.dumps(ident(e)))
    write_json(p, {"version": CORPUS_VERSION, "regressions": data["regressions"]})
    return added


# ---- reports -------------------------------------------------------------------------------
def write_reports(folder: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """``report.json``, ``junit.xml`` (one testcase per run) and a self-contained ``report.html``."""
    from killdrill.html_report import render_html
    from killdrill.report import write_json

    out = Path(folder)
    write_json(out / "report.json", dict(data))
    write_junit(out / "junit.xml", data)
    html = render_html(data)
    tmp = out / ".report.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out / "report.html")


def write_junit(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """One testcase per run, a failure element with the verdict text for each violated run."""
    from killdrill.report import render_case

    runs = [RunRecord.from_dict(r) for r in data["runs"]]
    cases = [CaseResult.from_dict(c) for c in data["cases"]]
    header = data["chaos"]
    suite = ET.Element(
        "testsuite",
        name=f"killdrill chaos seed {header['seed']} shard {header['shard']}",
        tests=str(len(runs)),
        failures=str(sum(r.outcome == VIOLATED for r in runs)),
        errors=str(sum(r.outcome == ERRORED for r in runs)),
        time=f"{sum(r.seconds for r in runs):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="seed", value=str(header["seed"]))
    for rec, case in zip(runs, cases, strict=True):
        tc = ET.SubElement(
            suite,
            "testcase",
            classname="killdrill.chaos",
            name=f"run {rec.index} [{rec.schedule}]",
            time=f"{rec.seconds:.3f}",
        )
        if rec.outcome in (VIOLATED, ERRORED):
            tag = "failure" if rec.outcome == VIOLATED else "error"
            el = ET.SubElement(tc, tag, message=", ".join(rec.kinds), type=rec.kinds[0] if rec.kinds else tag)
            el.text = render_case(case)
        elif rec.outcome == MISSED:
            ET.SubElement(tc, "system-out").text = "no kill landed: " + "; ".join(case.notes)
    tree = ET.ElementTree(ET.Element("testsuites"))
    tree.getroot().append(suite)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def render_text(data: Mapping[str, Any]) -> str:
    """The end-of-job text: counts, the kill spread over intervals, the shrunk failures."""
    h, s = data["chaos"], data["summary"]
    lines = [
        f"killdrill chaos: seed {h['seed']}, shard {h['shard']}: {s['runs']} runs "
        f"({s['runs_clean']} exactly-once, {s['runs_violated']} violated, "
        f"{s['runs_without_kill']} without a kill landed, {s['runs_harness_error']} harness error), "
        f"{s['kills_landed']} kills landed, "
        f"{s['kills_missed']} kills missed (the attempt exited 0 before its random kill time: not a failure)"
        + (f"; stopped by {h['stopped']}" if h.get("stopped") not in (None, "runs") else ""),
        "",
        "Kill spread (interval from this boundary to the next: kills landed, in violated runs):",
    ]
    rows = [
        (label, str(v["kills"]), str(v["violated"]) if v["violated"] else "")
        for label, v in data["spread"].items()
    ]
    width = max(len(r[0]) for r in rows)
    lines.extend(f"  {label.ljust(width)}  {kills:>5}  {bad}".rstrip() for label, kills, bad in rows)
    failures = data.get("failures") or []
    if failures:
        lines.append("")
        lines.append(f"{len(failures)} distinct failure(s), shrunk:")
        for f in failures:
            first = f" (run {f['index']})" if f.get("index") is not None else ""
            lines.append(f"  [{f['schedule']}] {', '.join(f['kinds'])}  from [{f['original']}]{first}")
            lines.append(f"    {f['reproduce']}")
    elif s["runs_violated"]:
        lines.append("")
        lines.append("Violated runs (not shrunk):")
        for r in data["runs"]:
            if r["outcome"] == VIOLATED:
                lines.append(f"  run {r['index']} [{r['schedule']}] {', '.join(r['kinds'])}")
    lines.append("")
    lines.append(f"seed: {h['seed']}")
    return "\n".join(lines)


def is_chaos_report(path: str | os.PathLike[str]) -> bool:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("chaos"), dict)


def merge_reports(paths: Sequence[str | os.PathLike[str]]) -> dict[str, Any]:
    """Join the shards of one seed's chaos job; overlapping or foreign shards are an error."""
    datas = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    first = datas[0]["chaos"]
    for p, d in zip(paths, datas, strict=True):
        h = d["chaos"]
        if h["seed"] != first["seed"] or h["command"] != first["command"]:
            raise ValueError(f"{p}: seed {h['seed']} / command differ from {paths[0]}: not shards of one job")
    runs: dict[int, tuple[RunRecord, CaseResult]] = {}
    for p, d in zip(paths, datas, strict=True):
        for r, c in zip(d["runs"], d["cases"], strict=True):
            if r["index"] in runs:
                raise ValueError(f"{p}: run {r['index']} is also in another file: shards overlap")
            runs[r["index"]] = (RunRecord.from_dict(r), CaseResult.from_dict(c))
    failures: dict[tuple[str, tuple[str, ...]], Shrunk] = {}
    for d in datas:
        for f in d.get("failures", ()):
            s = Shrunk.from_dict(f)
            failures.setdefault((s.schedule, s.kinds), s)
    ordered = [runs[i] for i in sorted(runs)]
    header = {
        **first,
        "shard": ",".join(sorted({d["chaos"]["shard"] for d in datas})),
        "stopped": ",".join(sorted({d["chaos"].get("stopped", "runs") for d in datas})),
        "elapsed_s": max(d["chaos"].get("elapsed_s", 0.0) for d in datas),
    }
    return _report_dict(
        header,
        Discovery.from_dict(datas[0]["discovery"]),
        [r for r, _ in ordered],
        [c for _, c in ordered],
        list(failures.values()),
    )


# ---- CLI ---------------------------------------------------------------------------------
_BUDGET_RE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")


def parse_budget(text: str) -> float:
    """``90s``, ``20m``, ``1.5h`` or plain seconds."""
    m = _BUDGET_RE.match(text.strip())
    if not m:
        raise ValueError(f"--budget {text!r}: expected e.g. 90s, 20m, 1h")
    return float(m[1]) * {"s": 1, "m": 60, "h": 3600, None: 1}[m[2]]


def parse_kills(text: str) -> tuple[int, int]:
    """``2`` or ``1..3``."""
    lo, sep, hi = text.partition("..")
    try:
        a, b = int(lo), int(hi if sep else lo)
    except ValueError:
        raise ValueError(f"--kills {text!r}: expected N or MIN..MAX, e.g. 1..3") from None
    if not 1 <= a <= b:
        raise ValueError(f"--kills {text!r}: need 1 <= MIN <= MAX")
    return a, b


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` with 1 <= K <= N."""
    k, sep, n = text.partition("/")
    try:
        a, b = int(k), int(n)
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected K/N, e.g. 2/4") from None
    if not sep or not 1 <= a <= b:
        raise ValueError(f"--shard {text!r}: need 1 <= K <= N")
    return a, b


def _cmd_chaos(args: argparse.Namespace) -> int:
    from killdrill.cli import UsageError, _need_command, drill_options

    command = _need_command(args)
    try:
        budget = parse_budget(args.budget) if args.budget else None
        kills = parse_kills(args.kills)
        shard = parse_shard(args.shard)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    runs = args.runs if args.runs is not None else (None if budget is not None else 100)
    if runs is not None and runs < 1:
        raise UsageError("--runs must be at least 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    options = ChaosOptions(
        seed=seed,
        runs=runs,
        budget_s=budget,
        min_kills=kills[0],
        max_kills=kills[1],
        shard=shard,
        workers=args.workers or os.cpu_count() or 1,
        report_dir=args.report,
        regressions=args.regressions,
        shrink=not args.no_shrink,
        shrink_runs=args.shrink_runs,
        max_failures=args.max_failures,
    )
    print(
        f"killdrill chaos: seed {seed} (reproduce with --seed {seed}), shard {shard[0]}/{shard[1]}",
        file=sys.stderr,
    )
    discovery = None
    if args.discovery:
        try:
            saved = json.loads(Path(args.discovery).read_text(encoding="utf-8"))
            discovery = Discovery.from_dict(saved.get("discovery", saved))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"--discovery {args.discovery}: not a saved discovery: {exc}") from exc
        if list(discovery.command) != list(command):
            raise UsageError(
                f"--discovery {args.discovery} was recorded from another command"
                f" ({shlex.join(discovery.command)}), not {shlex.join(command)}"
            )
    result = run_chaos(command, drill_options(args), options, discovery=discovery)
    data = result.to_dict()
    print(render_text(data))
    if args.json:
        from killdrill.report import write_json

        write_json(args.json, data)
    return result.exit_code()


def add_parser(sub: Any) -> None:
    """Register ``killdrill chaos`` with the CLI (called by ``killdrill.cli``)."""
    from killdrill.cli import add_drill_options

    p = sub.add_parser(
        "chaos",
        help="random kill schedules (offsets and inside each boundary interval), shrunk failures",
        description="Run random kill schedules against a command; shrink each failure to named boundaries. "
        "Exit 0 clean, 1 a violation found, 2 harness error.",
    )
    g = p.add_argument_group("chaos")
    g.add_argument(
        "--runs", type=int, help="random runs in total over all shards (default 100; none with --budget)"
    )
    g.add_argument(
        "--budget",
        metavar="TIME",
        help="stop starting runs this long after discovery, e.g. 20m (runs in flight finish)",
    )
    g.add_argument("--seed", type=int, help="seed of the schedules (default: random, printed)")
    g.add_argument("--kills", default="1..3", metavar="MIN..MAX", help="kills per run (1..3)")
    g.add_argument("--shard", default="1/1", metavar="K/N", help="run only the K-th of N disjoint parts")
    g.add_argument("--workers", type=int, help="worker processes (default: cores)")
    g.add_argument(
        "--report", metavar="DIR", help="write chaos.json, plans.jsonl, report.json, junit.xml, report.html"
    )
    g.add_argument("--regressions", metavar="PATH", help="append each distinct shrunk failure to this corpus")
    g.add_argument("--no-shrink", action="store_true", help="report failures as found, unshrunk")
    g.add_argument("--shrink-runs", type=int, default=24, help="cases each shrink may run (24)")
    g.add_argument("--max-failures", type=int, help="stop starting runs after this many violated runs")
    g.add_argument(
        "--discovery",
        metavar="FILE",
        help="reuse a saved discovery (chaos.json of an earlier job, or killdrill points --json): "
        "identical millisecond schedules on every shard and machine",
    )
    g.add_argument("--json", metavar="FILE", help="also write report.json here")
    add_drill_options(p)
    p.set_defaults(func=_cmd_chaos)
