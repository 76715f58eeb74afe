"""The detection table: does a named-point drill catch every planted defect, with no false alarm?

    python -m tests.detection [--drills 100] [--repeat 1] [--chaos 30] [--seed 1] [--workers 2]
                              [--only NAME ...] [--json FILE]

For each defect agent: ``--repeat`` full named-point drills (every catalogue point, one case
each; the detection rate is the share of drills in which some case reported an expected kind):
the points whose case reported one, and the kinds; then random chaos runs (a seeded
``offset:Xms`` kill, uniform over the clean run's duration) until the first catch, where a kill
that did not land counts as a miss, never a catch.  For each correct agent: ``--drills`` full
drills and ``--chaos`` random runs, counting false alarms.  A defect the drill cannot catch is
printed as ``missed``: it is a finding about killdrill, not a row to drop.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from killdrill.drill import Drill, DrillOptions
from killdrill.records import HANG, HARNESS_ERROR, POINT_NOT_REACHED, CaseResult
from tests.detection.corpus import CORPUS, Agent, langgraph_available

try:
    import killdrill.chaos.job as CHAOS
except ImportError:  # the chaos module is optional here: fall back to seeded offset kills
    CHAOS = None  # type: ignore[assignment]

NOT_A_CATCH = frozenset({POINT_NOT_REACHED, HARNESS_ERROR, HANG})
"""Kinds that say the case tested nothing (kill did not land, harness broke): never a catch."""


def catches(agent: Agent, case: CaseResult) -> bool:
    """Did this case catch the agent's defect?  Any expected kind (any real violation if none is
    named), and the named root cause on one of its violations when the corpus names one."""
    kinds = set(case.kinds)
    if agent.cause and not any(v.cause == agent.cause for v in case.violations):
        return False
    if agent.expect:
        return bool(kinds & set(agent.expect))
    return bool(kinds - NOT_A_CATCH)


def false_alarm(case: CaseResult, *, named: bool = False) -> bool:
    """A correct agent's case that reported a violation.  A random kill that did not land is no
    alarm; a named point a clean run reached that the case's own run did not reach is one."""
    return bool(set(case.kinds) - (set() if named else {POINT_NOT_REACHED}))


LAUNCHER = {"name": "spawn"}  # --launcher; forked attempts make 100 full drills per agent affordable


def make_drill(agent: Agent, root: Path) -> Drill:
    options = DrillOptions(root=root / agent.name.split()[0], launcher=LAUNCHER["name"], **agent.options)
    return Drill(agent.command, options)


@dataclass
class Row:
    """One line of the table, also its JSON."""

    agent: str
    defect: str | None
    expect: list[str]
    points: int = 0
    caught_at: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    named_caught: bool | None = None
    chaos_runs: int = 0
    chaos_first_catch: int | None = None  # 1-based run number of the first catch
    chaos_landed: int = 0
    drills: int = 0
    drill_cases: int = 0
    false_alarm_drills: int = 0
    false_alarm_cases: list[str] = field(default_factory=list)
    chaos_false_alarms: int = 0
    detect_drills: int = 0  # full named drills of a defect agent
    detect_caught: int = 0  # of which some case reported an expected kind
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def chaos_schedules(drill: Drill, seed: int, n: int) -> list[str]:
    """``n`` random schedules, the same for the same seed: ``killdrill.chaos.job``'s plans when it
    is installed (1..3 kills, offsets and ``POINT+Xms``), else ``offset:`` kills over the run."""
    discovery = drill.discover()
    if CHAOS is not None:
        return [str(CHAOS.plan_schedule(discovery, seed, i)) for i in range(n)]
    rng = random.Random(f"{seed}:{drill.command}")
    return [f"offset:{rng.uniform(1.0, max(2.0, discovery.duration_ms)):.1f}ms" for _ in range(n)]


def chaos_run(drill: Drill, schedule: str, seed: int) -> CaseResult:
    if CHAOS is not None:
        return CHAOS.chaos_case(drill, schedule, seed=seed)  # a kill past the end is a miss
    return drill.run_case(schedule, check=False, seed=seed)


def landed(case: CaseResult) -> bool:
    """Did any kill of the schedule land?  A run whose kills all missed tested nothing."""
    return any(a.killed_at is not None for a in case.attempts)


def detect(agent: Agent, drill: Drill, chaos: int, seed: int, repeat: int = 1) -> Row:
    """A defect agent: ``repeat`` named-point drills, then chaos runs until the first catch."""
    t0 = time.monotonic()
    row = Row(agent.name, agent.defect, list(agent.expect))
    kinds: dict[str, None] = {}
    for _ in range(max(1, repeat)):
        result = drill.run_all()
        row.points = len(result.cases)
        row.detect_drills += 1
        caught = [case for case in result.cases if catches(agent, case)]
        row.detect_caught += bool(caught)
        for case in caught:
            if case.schedule not in row.caught_at:
                row.caught_at.append(case.schedule)
            kinds.update(dict.fromkeys(case.kinds))
        for case in result.cases:
            if case not in caught and set(case.kinds) & NOT_A_CATCH:
                row.notes.append(f"{case.schedule}: {', '.join(case.kinds)}")
    row.kinds = list(kinds)
    row.named_caught = row.detect_caught == row.detect_drills
    if agent.known_miss and not row.named_caught:
        row.notes.append(f"finding: {agent.known_miss}")
    for i, schedule in enumerate(chaos_schedules(drill, seed, chaos), 1):
        case = chaos_run(drill, schedule, seed)
        row.chaos_runs = i
        row.chaos_landed += landed(case)
        if landed(case) and catches(agent, case):
            row.chaos_first_catch = i
            break
    row.seconds = time.monotonic() - t0
    return row


def false_alarms(agent: Agent, drill: Drill, drills: int, chaos: int, seed: int, workers: int) -> Row:
    """A correct agent: ``drills`` full drills and ``chaos`` random runs; every violation is an alarm."""
    t0 = time.monotonic()
    row = Row(agent.name, None, [])
    drill.discover()

    def one_drill(_: int) -> list[CaseResult]:
        return list(drill.run_all().cases)

    def one_chaos(schedule: str) -> CaseResult:
        return chaos_run(drill, schedule, seed)

    with ThreadPoolExecutor(workers) as pool:
        for cases in pool.map(one_drill, range(drills)):
            row.drills += 1
            row.drill_cases += len(cases)
            bad = [c for c in cases if false_alarm(c, named=True)]
            row.false_alarm_drills += bool(bad)
            row.false_alarm_cases += [f"{c.schedule}: {', '.join(c.kinds)} ({c.workdir})" for c in bad]
        schedules = chaos_schedules(drill, seed, chaos)
        for case in pool.map(one_chaos, schedules):
            row.chaos_runs += 1
            row.chaos_landed += landed(case)
            if false_alarm(case):
                row.chaos_false_alarms += 1
                row.false_alarm_cases.append(f"{case.schedule}: {', '.join(case.kinds)} ({case.workdir})")
    row.points = len(drill.discover().catalogue)
    row.seconds = time.monotonic() - t0
    return row


def render(rows: Sequence[Row], *, drills: int, chaos: int, seed: int) -> str:
    head = (
        "agent",
        "defect",
        "named drill",
        "caught at (points)",
        "violation kinds",
        f"chaos (≤{chaos})",
    )
    body: list[tuple[str, ...]] = []
    for r in rows:
        if r.defect is not None:
            at = ", ".join(r.caught_at[:3]) + (f" +{len(r.caught_at) - 3}" if len(r.caught_at) > 3 else "")
            first = (
                f"run {r.chaos_first_catch} ({r.chaos_landed} landed)"
                if r.chaos_first_catch
                else f"not in {r.chaos_runs} ({r.chaos_landed} landed)"
            )
            body.append(
                (
                    r.agent,
                    r.defect,
                    ("yes" if r.named_caught else "MISSED")
                    + (f" {r.detect_caught}/{r.detect_drills}" if r.detect_drills > 1 else ""),
                    f"{len(r.caught_at)}/{r.points}: {at}" if r.caught_at else f"0/{r.points}",
                    ", ".join(r.kinds) or "-",
                    first,
                )
            )
        else:
            body.append(
                (
                    r.agent,
                    "(correct)",
                    f"{r.false_alarm_drills}/{r.drills} drills alarmed",
                    f"{r.drill_cases} cases, {r.points} points",
                    "-" if not r.false_alarm_cases else "FALSE ALARM",
                    f"{r.chaos_false_alarms}/{r.chaos_runs} alarmed ({r.chaos_landed} landed)",
                )
            )
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in (head, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    defects = [r for r in rows if r.defect is not None]
    correct = [r for r in rows if r.defect is None]
    caught = sum(bool(r.named_caught) for r in defects)
    lines.append("")
    lines.append(
        f"defects caught by the named-point drill: {caught}/{len(defects)}"
        f" ({100 * caught / max(1, len(defects)):.0f}%)"
    )
    drills_run = sum(r.detect_drills for r in defects)
    drills_caught = sum(r.detect_caught for r in defects)
    lines.append(
        f"detection rate: {drills_caught}/{drills_run} named drills of defect agents caught their defect"
        f" with an expected kind ({100 * drills_caught / max(1, drills_run):.1f}%)"
    )
    alarmed, full = sum(r.false_alarm_drills for r in correct), sum(r.drills for r in correct)
    lines.append(
        f"false alarms of correct agents: {alarmed} of {full} full drills"
        f" ({100 * alarmed / max(1, full):.1f} per 100 drills), "
        f"{sum(r.chaos_false_alarms for r in correct)} of {sum(r.chaos_runs for r in correct)} chaos runs"
    )
    how = "killdrill.chaos.job plans (1..3 kills)" if CHAOS is not None else "seeded offset: kills"
    lines.append(f"seed {seed}; chaos runs = {how}; a run whose kills all missed is a miss, not a catch")
    for r in rows:
        for note in r.notes + r.false_alarm_cases:
            lines.append(f"  {r.agent}: {note}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.detection", description=__doc__.split("\n")[0])
    parser.add_argument("--drills", type=int, default=100, help="full drills per correct agent")
    parser.add_argument("--repeat", type=int, default=1, help="full named drills per defect agent")
    parser.add_argument("--chaos", type=int, default=30, help="random runs per agent (cap, for defects)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", nargs="*", help="agent names to run (default: all)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    parser.add_argument("--launcher", choices=["spawn", "fork"], default="spawn", help="how attempts start")
    args = parser.parse_args(argv)
    LAUNCHER["name"] = args.launcher

    agents = [a for a in CORPUS if not args.only or a.name.split()[0] in args.only]
    if not langgraph_available():
        agents = [a for a in agents if "langgraph" not in a.options.get("integrations", ())]
        print("note: langgraph or its example is missing; the LangGraph agent is left out", file=sys.stderr)
    for a in [a for a in agents if a.unavailable()]:
        agents.remove(a)
        print(f"note: {a.name} is left out: {a.unavailable()}", file=sys.stderr)
    root = Path(tempfile.mkdtemp(prefix="killdrill-detection-"))
    lock = threading.Lock()
    rows: dict[str, Row] = {}

    def job(agent: Agent) -> Callable[[], None]:
        def go() -> None:
            drill = make_drill(agent, root)
            if agent.correct:
                row = false_alarms(agent, drill, args.drills, args.chaos, args.seed, args.workers)
            else:
                row = detect(agent, drill, args.chaos, args.seed, args.repeat)
            with lock:
                rows[agent.name] = row
                print(f"  done {agent.name} in {row.seconds:.0f}s", file=sys.stderr, flush=True)

        return go

    t0 = time.monotonic()
    try:
        defects = [a for a in agents if not a.correct]
        with ThreadPoolExecutor(args.workers) as pool:
            for f in [pool.submit(job(a)) for a in defects]:
                f.result()
        for a in agents:  # correct agents parallelise their own drills
            if a.correct:
                job(a)()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ordered = [rows[a.name] for a in agents if a.name in rows]
    print(render(ordered, drills=args.drills, chaos=args.chaos, seed=args.seed))
    print(f"wall time {time.monotonic() - t0:.0f}s with {args.workers} workers on {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in ordered], indent=2))
    missed = any(r.defect is not None and not r.named_caught for r in ordered)
    alarms = any(r.false_alarm_cases for r in ordered)
    return 1 if missed or alarms else 0
