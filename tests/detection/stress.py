"""The corpus's nondeterministic agents drilled over and over, keeping every wrong verdict.

    python -m tests.detection.stress --out DIR [--rounds 5] [--workers 2] [--only NAME ...]

Each round drills every correct shape agent at every catalogue point (a LangGraph or Temporal
agent: the points around its effects) and every planted bug at each of its catch points.  A
correct agent's case that reports anything, a planted bug's case that reports none of its
expected kinds, or one that reports a kind it does not expect, is a wrong verdict: its JSON report
is written to ``DIR/bad/`` and its workdir kept (passing workdirs are deleted after the verdict).
Run it beside a load (a CPU hog, other drills): the verdict must not depend on timing the agent
does not control.  ``--chaos N`` adds N random schedules (chaos's plans: offsets, ``POINT+Xms``)
per correct agent.  One JSON line per case goes to ``DIR/cases.jsonl``; the totals are printed
at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from killdrill.drill import Drill, DrillOptions
from killdrill.records import CaseResult
from tests.detection.corpus import SHAPE_CORRECT, SHAPE_DEFECTS, TEMPORAL_RECEIPT, Agent, langgraph_available
from tests.detection.run import catches, chaos_run, chaos_schedules, false_alarm

AGENTS: tuple[Agent, ...] = (*SHAPE_CORRECT, *SHAPE_DEFECTS, *TEMPORAL_RECEIPT)


def _points(agent: Agent, drill: Drill) -> list[str]:
    if agent.defect is not None:
        return [p for p in agent.catch if p in drill.points()]
    labels = drill.points()
    if not ({"langgraph", "temporal"} & set(agent.options.get("integrations", ()))):
        return labels
    return [
        lb
        for lb in labels
        if lb.startswith("during:")
        or (not lb.split("#")[0].endswith(":checkpoint") and not lb.startswith("before:"))
    ]


def _wrong(agent: Agent, case: CaseResult) -> str:
    """Why this case's verdict is wrong for this agent, or ``""``."""
    if agent.defect is None:
        return f"false alarm: {', '.join(case.kinds)}" if not case.ok else ""
    if not (case.attempts and case.attempts[0].killed_at):
        return f"miss: the kill did not land ({', '.join(case.kinds) or 'no violation'})"
    if not catches(agent, case):
        return f"miss: {', '.join(case.kinds) or 'no violation'}"
    strange = set(case.kinds) - set(agent.expect)
    return f"caught, with unexpected kinds: {', '.join(sorted(strange))}" if strange else ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.detection.stress", description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--chaos", type=int, default=0, help="random-offset runs per correct agent")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    out: Path = args.out
    (out / "bad").mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    totals = {"cases": 0, "correct_cases": 0, "bug_cases": 0, "false_alarms": 0, "misses": 0, "misjudged": 0}
    agents = [a for a in AGENTS if not args.only or a.name in args.only]
    for agent in agents:
        if "langgraph" in agent.options.get("integrations", ()) and not langgraph_available():
            print(f"skip {agent.name}: langgraph is not installed", flush=True)
            continue
        if agent.unavailable():
            print(f"skip {agent.name}: {agent.unavailable()}", flush=True)
            continue
        t0 = time.monotonic()
        root = out / "work" / agent.name
        options = DrillOptions(root=root, workers=args.workers, keep=True, **agent.options)
        with Drill(agent.command, options) as drill:
            points = _points(agent, drill)

            def one(point: str, agent: Agent = agent, drill: Drill = drill) -> None:
                if point.startswith("chaos "):  # a random schedule: a kill that missed tested nothing
                    case = chaos_run(drill, point.split(" ", 1)[1], args.seed)
                    why = f"false alarm: {', '.join(case.kinds)}" if false_alarm(case) else ""
                else:
                    case = drill.run_case(point)
                    why = _wrong(agent, case)
                with lock:
                    totals["cases"] += 1
                    totals["correct_cases" if agent.correct else "bug_cases"] += 1
                    if why:
                        kind = "misjudged" if why.startswith("caught") else "misses"
                        totals["false_alarms" if agent.correct else kind] += 1
                        name = f"{agent.name}-{totals['cases']:05d}.json"
                        (out / "bad" / name).write_text(json.dumps(case.to_dict(), indent=1, default=str))
                        print(f"WRONG {agent.name} {case.schedule}: {why} ({case.workdir})", flush=True)
                    with open(out / "cases.jsonl", "a", encoding="utf-8") as fh:
                        row = {"agent": agent.name, "point": point, "kinds": list(case.kinds)}
                        row.update(causes=[v.cause for v in case.violations], wrong=why)
                        fh.write(json.dumps({**row, "workdir": case.workdir}) + "\n")
                if not why:
                    shutil.rmtree(case.workdir, ignore_errors=True)

            work = [p for _ in range(args.rounds) for p in points]
            if agent.correct and args.chaos:
                work += [f"chaos {s}" for s in chaos_schedules(drill, args.seed, args.chaos)]
            with ThreadPoolExecutor(args.workers) as pool:
                list(pool.map(one, work))
        print(f"{agent.name}: {len(work)} cases in {time.monotonic() - t0:.0f} s", flush=True)
    print(json.dumps(totals), flush=True)
    (out / "totals.json").write_text(json.dumps(totals))
    return 1 if totals["false_alarms"] or totals["misses"] or totals["misjudged"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
