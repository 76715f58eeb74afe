"""Two trees' verdicts, case by case, in one run: the detection corpus and the repeated framework drills.

    python tests/detection/compare_trees.py BEFORE AFTER [--rounds 3] [--jobs 1] [--only NAME ...]
        [--skip-detection] [--skip-repeated] [--stop-after SECONDS] [--jsonl FILE]
    python tests/detection/compare_trees.py --table FILE   (the table of a run's --jsonl)

``BEFORE`` and ``AFTER`` are two checkouts of killdrill, each with its own ``.venv`` (the package
installed editable, with the framework extras).  This file starts one worker per tree
(``TREE/.venv/bin/python compare_trees.py --worker TREE``, the tree first on ``sys.path``), so
each tree runs its own killdrill and its own corpus (``tests/detection/corpus.py``): an agent's
command and options are the tree's own, and an agent only one tree has is listed apart, never a
difference.  Every case is sent to both workers at once (``--jobs`` pairs in flight), so both
trees see the same load; the result of a case is its violation kinds and each violation's cause.

Two parts:

- **detection**: every corpus agent (planted bugs and correct agents), one case per point of its
  catalogue, with the detection table's drill (``tests.detection.run.make_drill``: spawned
  attempts).  No chaos runs: their random schedules are not cases two trees can pair.
- **repeated**: the correct example of every framework the corpus drills (settlement, LangGraph,
  DBOS, Temporal, the OpenAI Agents SDK, LlamaIndex, pydantic-ai on DBOS), every point
  ``--rounds`` times, with the acceptance tests' forked attempts (``launcher="fork"``, the
  framework preloaded, one discovery run).

A common point whose kinds or causes differ between the trees is printed with both results and
the workdir of each (kept under the workers' roots until the end of the run, then removed unless
``--keep``).  Exit status: 0 every common case the same, 1 a difference, 2 a worker failed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# The repeated drills: the corpus's correct framework example and what its fork template preloads
# (as tests/acceptance/test_{settlement_drill,langgraph,dbos,temporal,openai_agents,llama_index,
# pydantic_ai}.py drill them).
REPEATED: dict[str, tuple[str, tuple[str, ...]]] = {
    "settlement": ("settlement (bundled)", ()),
    "langgraph": (
        "settlement_langgraph (bundled)",
        ("langgraph.checkpoint.sqlite", "killdrill.examples.settlement_langgraph"),
    ),
    "dbos": ("payout_dbos (bundled)", ("dbos", "killdrill.examples.payout_dbos")),
    "temporal": ("payout_temporal (bundled)", ("killdrill.examples.payout_temporal",)),
    "openai_agents": ("billing_openai_agents (bundled)", ("agents", "stripe", "httpx")),
    "llama_index": ("ticket_llama_index (bundled)", ("killdrill.examples.ticket_llama_index",)),
    "pydantic_ai_dbos": (
        "pydantic_ai_dbos (bundled)",
        ("dbos", "pydantic_ai", "pydantic_ai.durable_exec.dbos", "pydantic_ai.models.function"),
    ),
}


# ------------------------------------------------------------------ the worker (inside one tree)


class Worker:
    """One tree's drills, kept open across cases (one discovery, one fork template per drill)."""

    def __init__(self, tree: Path) -> None:
        from tests.detection.corpus import CORPUS, langgraph_available

        self.tree = tree
        self.root = Path(tempfile.mkdtemp(prefix="killdrill-compare-"))
        self.agents = {a.name: a for a in CORPUS}
        if not langgraph_available():
            self.agents = {
                n: a for n, a in self.agents.items() if "langgraph" not in a.options.get("integrations", ())
            }
        self.drills: dict[tuple[str, str], Any] = {}
        self.lock = threading.Lock()
        self.building: dict[tuple[str, str], threading.Lock] = {}

    def drill(self, mode: str, name: str) -> Any:
        from killdrill.drill import Drill, DrillOptions
        from tests.detection.run import make_drill

        key = (mode, name)
        with self.lock:
            build = self.building.setdefault(key, threading.Lock())
        with build:
            if key not in self.drills:
                agent = self.agents[name]
                root = self.root / mode / str(len(self.drills))
                if mode == "detection":
                    d = make_drill(agent, root)
                else:
                    preload = next(p for n, p in REPEATED.values() if n == name)
                    options = {
                        **agent.options,
                        "launcher": "fork",
                        "preload": preload,
                        "discovery_runs": 1,
                        "timeout": max(60, agent.options.get("timeout", 0)),
                    }
                    d = Drill(agent.command, DrillOptions(root=root, **options))
                d.__enter__()
                self.drills[key] = d
            return self.drills[key]

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "agents":
            return {
                "agents": [
                    {
                        "name": n,
                        "correct": a.correct,
                        "expect": list(a.expect),
                        "unavailable": a.unavailable(),
                    }
                    for n, a in self.agents.items()
                ],
                "root": str(self.root),
                "killdrill": importlib.import_module("killdrill").__file__,
            }
        if op == "points":
            started = time.monotonic()
            points = self.drill(req["mode"], req["agent"]).points()
            return {"points": points, "seconds": time.monotonic() - started}
        if op == "case":
            return self.case(req)
        raise ValueError(f"unknown op {op!r}")

    def case(self, req: dict[str, Any]) -> dict[str, Any]:
        from tests.detection.run import catches

        started = time.monotonic()
        case = self.drill(req["mode"], req["agent"]).run_case(req["point"])
        agent = self.agents[req["agent"]]
        return {
            "kinds": sorted(case.kinds),
            "causes": sorted({f"{v.kind}:{v.cause}" for v in case.violations}),
            "killed_at": case.attempts[0].killed_at if case.attempts else None,
            "outcomes": [a.outcome for a in case.attempts],
            "caught": None if agent.correct else catches(agent, case),
            "workdir": case.workdir,
            "seconds": round(time.monotonic() - started, 2),
        }

    def close(self) -> None:
        for d in self.drills.values():
            try:
                d.close()
            except Exception as e:
                print(f"close: {e}", file=sys.stderr)


def serve(tree: Path, keep: bool) -> int:
    """The worker's loop: one JSON request per stdin line, answered (with its id) on stdout."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(tree)] + [p for p in sys.path if Path(p or ".").resolve() != here]
    os.chdir(tree)
    worker = Worker(tree)
    out_lock = threading.Lock()
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # a drill's prints must not corrupt the answers

    def answer(req: dict[str, Any]) -> None:
        try:
            body = {"ok": True, **worker.handle(req)}
        except Exception as e:
            body = {"ok": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
        with out_lock:
            real_stdout.write(json.dumps({"id": req["id"], **body}) + "\n")
            real_stdout.flush()

    with ThreadPoolExecutor(8) as pool:
        for line in sys.stdin:
            if line.strip():
                pool.submit(answer, json.loads(line))
    worker.close()
    if not keep:
        shutil.rmtree(worker.root, ignore_errors=True)
    return 0


# ------------------------------------------------------------------ the orchestrator


class Tree:
    """A worker process of one tree, and the answers it owes."""

    def __init__(self, label: str, path: Path, keep: bool) -> None:
        self.label, self.path = label, path
        argv = [str(path / ".venv" / "bin" / "python"), "-u", __file__, "--worker", str(path)]
        if keep:
            argv.append("--keep")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=path)
        self.pending: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.lock:
                box = self.pending.pop(msg["id"])
            box.put(msg)
        with self.lock:
            for box in self.pending.values():
                box.put({"ok": False, "error": f"{self.label} worker exited"})

    def ask(self, **req: Any) -> queue.Queue[dict[str, Any]]:
        box: queue.Queue[dict[str, Any]] = queue.Queue()
        with self.lock:
            self.next_id += 1
            self.pending[self.next_id] = box
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"id": self.next_id, **req}) + "\n")
            self.proc.stdin.flush()
        return box

    def close(self) -> int:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            return self.proc.wait()


def both(trees: list[Tree], **req: Any) -> list[dict[str, Any]]:
    """Ask both trees at once; their answers, in the trees' order."""
    boxes = [t.ask(**req) for t in trees]
    return [b.get() for b in boxes]


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same result: kinds, causes, where the kill landed, or the same error (its workdir aside)."""
    keys = ("ok", "kinds", "causes", "killed_at")
    return all(a.get(k) == b.get(k) for k in keys) and _error(a) == _error(b)


def _error(r: dict[str, Any]) -> str:
    return re.sub(r"/\S*killdrill-compare-\S*", "WORKDIR", str(r.get("error", "")))


def describe(r: dict[str, Any]) -> str:
    if not r.get("ok"):
        return f"error {r.get('error')}"
    kinds = ",".join(r["kinds"]) or "exactly-once"
    causes = ",".join(c.split(":", 1)[1] for c in r["causes"])
    landed = "" if r["killed_at"] is not None else " (kill did not land)"
    return f"{kinds}" + (f" [{causes}]" if causes else "") + landed


def cases(
    trees: list[Tree], plan: list[tuple[str, str, int]], log: Any, stop_at: float
) -> Iterator[tuple[str, str, int, str, list[dict[str, Any]]]]:
    """Every point of each (mode, agent, round) of the plan, one pair of answers per case."""
    shown: set[str] = set()
    for mode, agent, rnd in plan:
        if time.monotonic() > stop_at:
            return
        pts = both(trees, op="points", mode=mode, agent=agent)
        if not all(p.get("ok") for p in pts):
            yield mode, agent, 0, "(discovery)", pts
            continue
        common = [p for p in pts[1]["points"] if p in set(pts[0]["points"])]
        for i, p in enumerate(pts):
            only = [x for x in p["points"] if x not in common]
            if only and agent not in shown:
                print(f"  {agent}: points only {trees[i].label}: {', '.join(only)}", file=log, flush=True)
        shown.add(agent)
        for point in common:
            if time.monotonic() > stop_at:
                return
            yield mode, agent, rnd, point, []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path, nargs="?")
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each repeated framework drill")
    parser.add_argument("--jobs", type=int, default=1, help="pairs of cases in flight")
    parser.add_argument("--only", nargs="*", help="agent names (first word) or framework names")
    parser.add_argument("--skip-detection", action="store_true")
    parser.add_argument("--skip-repeated", action="store_true")
    parser.add_argument(
        "--stop-after", type=float, default=0, help="send no new case after this many seconds"
    )
    parser.add_argument("--jsonl", type=Path, help="every case's pair of results, one JSON line each")
    parser.add_argument("--keep", action="store_true", help="keep the workers' workdirs")
    parser.add_argument("--table", type=Path, help="print the table of a run's --jsonl file, run nothing")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return serve(args.worker.resolve(), args.keep)
    if args.table:
        rows = [json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]
        for r in rows:
            r["same"] = same(r["before"], r["after"])
        summarize(rows, {}, 0.0)
        return 0 if all(r["same"] for r in rows) else 1
    if not (args.before and args.after):
        parser.error("BEFORE and AFTER are required")
    trees = [Tree("before", args.before.resolve(), args.keep), Tree("after", args.after.resolve(), args.keep)]
    log = sys.stderr
    stop_at = time.monotonic() + (args.stop_after or 1e9)
    t0 = time.monotonic()
    results: list[dict[str, Any]] = []
    out = args.jsonl.open("w") if args.jsonl else None
    try:
        listed = both(trees, op="agents")
        if not all(x.get("ok") for x in listed):
            print(f"a worker failed: {listed}", file=log)
            return 2
        names = [{a["name"]: a for a in x["agents"]} for x in listed]
        for t, x in zip(trees, listed, strict=True):
            print(f"{t.label}: killdrill {x['killdrill']}, workdirs under {x['root']}", file=log)

        def wanted(name: str) -> bool:
            return not args.only or name.split()[0] in args.only

        only_one = {
            t.label: sorted(n for n in names[i] if n not in names[1 - i] and wanted(n))
            for i, t in enumerate(trees)
        }
        unavailable = sorted(
            n
            for n in names[1]
            if n in names[0] and (names[0][n]["unavailable"] or names[1][n]["unavailable"])
        )
        common = [n for n in names[1] if n in names[0] and n not in unavailable and wanted(n)]
        plan: list[tuple[str, str, int]] = []
        if not args.skip_detection:
            plan += [("detection", n, 1) for n in common]
        if not args.skip_repeated:
            plan += [  # round after round: a run cut short by --stop-after has every framework
                ("repeated", agent, rnd)
                for rnd in range(1, args.rounds + 1)
                for fw, (agent, _) in REPEATED.items()
                if agent in common and (not args.only or fw in args.only or agent.split()[0] in args.only)
            ]
        print(f"plan: {len(plan)} drills; only in one tree: {only_one}; unavailable: {unavailable}", file=log)

        lock = threading.Lock()

        def run(mode: str, agent: str, rnd: int, point: str) -> None:
            pair = both(trees, op="case", mode=mode, agent=agent, point=point)
            record(mode, agent, rnd, point, pair)

        def record(mode: str, agent: str, rnd: int, point: str, pair: list[dict[str, Any]]) -> None:
            row = {
                "mode": mode,
                "agent": agent,
                "round": rnd,
                "point": point,
                "before": pair[0],
                "after": pair[1],
            }
            row["same"] = same(pair[0], pair[1])
            with lock:
                results.append(row)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                mark = "same" if row["same"] else "DIFF"
                text = describe(pair[0]) if row["same"] else f"{describe(pair[0])} | {describe(pair[1])}"
                print(f"{mark} {mode} {agent} r{rnd} {point}: {text}", file=log, flush=True)

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = []
            for mode, agent, rnd, point, pair in cases(trees, plan, log, stop_at):
                if pair:
                    record(mode, agent, rnd, point, pair)
                else:
                    futures.append(pool.submit(run, mode, agent, rnd, point))
                    while sum(not f.done() for f in futures) >= max(1, args.jobs):
                        time.sleep(0.05)
            for f in futures:
                f.result()
    finally:
        codes = [t.close() for t in trees]
        if out:
            out.close()
    summarize(results, only_one if "only_one" in locals() else {}, time.monotonic() - t0)
    if any(codes):
        return 2
    return 0 if all(r["same"] for r in results) else 1


def summarize(results: list[dict[str, Any]], only_one: dict[str, list[str]], seconds: float) -> None:
    """The table: per (mode, agent), cases, same, different, violated in each tree, and the median
    over its cases of each tree's seconds per case and of the pairs' ratio after/before (both ran
    at once); then every difference."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["mode"], r["agent"]), []).append(r)
    print(
        f"{'mode':<10} {'agent':<48} {'cases':>5} {'same':>5} {'diff':>4} {'viol b':>6} {'viol a':>6}"
        f" {'s/case b':>8} {'s/case a':>8} {'a/b':>5}"
    )
    for (mode, agent), rows in groups.items():
        viol = [sum(bool(r[t].get("kinds")) or not r[t].get("ok") for r in rows) for t in ("before", "after")]
        n_same = sum(r["same"] for r in rows)
        n_diff = len(rows) - n_same
        timed = [r for r in rows if r["before"].get("seconds") and r["after"].get("seconds")]
        sb = statistics.median(r["before"]["seconds"] for r in timed) if timed else 0.0
        sa = statistics.median(r["after"]["seconds"] for r in timed) if timed else 0.0
        ratio = (
            statistics.median(r["after"]["seconds"] / r["before"]["seconds"] for r in timed) if timed else 0.0
        )
        print(
            f"{mode:<10} {agent:<48} {len(rows):>5} {n_same:>5} {n_diff:>4} {viol[0]:>6} {viol[1]:>6}"
            f" {sb:>8.2f} {sa:>8.2f} {ratio:>5.2f}"
        )
    total = len(results)
    print(
        f"\n{total} common cases, {sum(r['same'] for r in results)} the same, "
        f"{sum(not r['same'] for r in results)} different, in {seconds:.0f} s"
    )
    for label, agents in only_one.items():
        if agents:
            print(f"only in {label}: {', '.join(agents)}")
    for r in results:
        if not r["same"]:
            print(
                f"DIFF {r['mode']} {r['agent']} r{r['round']} {r['point']}:\n"
                f"    before: {describe(r['before'])}  {r['before'].get('workdir', '')}\n"
                f"    after:  {describe(r['after'])}  {r['after'].get('workdir', '')}"
            )


if __name__ == "__main__":
    sys.exit(main())
