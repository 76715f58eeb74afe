"""Two trees' benchmark rows side by side in one run, in alternating rounds: ratios after/before.

    python tests/benchmarks/compare_trees.py BEFORE AFTER [--rounds 3] [--rows ROW ...] [--json FILE]
        [--jsonl FILE] [--stop-after SECONDS]

``BEFORE`` and ``AFTER`` are two checkouts of killdrill, each with its own ``.venv``.  Each
measurement is one process of the tree's own interpreter with the tree first on ``sys.path``
(``--measure ROW --tree TREE``), calling the tree's own benchmark functions (``tests/benchmarks/``:
``bench``, ``effects``, ``growth``) on the tree's own killdrill.  The runtime rows time the three
cases of each bundled framework example as the tree's ``tests.benchmarks.runtimes.runtimes()``
declares them (one discovery, then the three cases, with no floor beside them: the floors are
AFTER's only), with the same timing code for both trees (this file's).

A round runs every row once in each tree, the two trees back to back, BEFORE first on odd rounds
and AFTER first on even ones, so the machine's load falls on both alike.  Printed per figure: the
median over rounds of each tree's value and the median of the rounds' ratios after/before (a ratio
of two figures measured minutes apart under the same load); the load average of each
measurement is in the JSON.

Rows (``--rows``, default all): ``boundary`` (unarmed ``boundary()`` vs an empty call),
``armed`` (an armed round trip), ``supervisor`` (per attempt beyond a bare launch), ``containment``,
``drill`` (the settlement example's full drill vs the hand-written one), ``prefork`` (the LangGraph
drill spawned vs forked), ``runtime:NAME`` (``langgraph``, ``dbos``, ``temporal``, ``openai_agents``,
``llama_index``), ``effects`` and ``growth`` (``--quick`` sizes), ``pytest`` (the tree's own pytest
route rows, one pair each: a row's flags are the tree's, e.g. ``2_workers`` was ``pytest -n 2`` before
the plugin's ``--killdrill-workers``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RUNTIMES = ("langgraph", "dbos", "temporal", "openai_agents", "llama_index")
ROWS = (
    "boundary",
    "armed",
    "supervisor",
    "containment",
    "drill",
    "prefork",
    *(f"runtime:{n}" for n in RUNTIMES),
    "effects",
    "growth",
    "pytest",
)


# ------------------------------------------------------------------ one measurement, inside a tree


def runtime_row(name: str, root: Path) -> dict[str, Any]:
    """One discovery and the three cases of one framework example, as the tree declares them."""
    import importlib.util

    from killdrill.drill import Drill, DrillOptions
    from tests.benchmarks.runtimes import REPO, runtimes

    rt = next(r for r in runtimes() if r.name == name)
    if importlib.util.find_spec(rt.module) is None:
        return {}
    options = DrillOptions(root=root / rt.name, cwd=str(REPO), timeout=60, **rt.options)
    with Drill(rt.command, options) as drill:
        t0 = time.perf_counter()
        drill.points()
        t1 = time.perf_counter()
        cases = [drill.run_case(p) for p in rt.points]
        t2 = time.perf_counter()
    return {
        f"runtime_{name}_discovery_s": t1 - t0,
        f"runtime_{name}_case_s": (t2 - t1) / len(cases),
        f"runtime_{name}_verdicts_ok": float(all(c.ok for c in cases)),
    }


def measure(row: str, root: Path) -> dict[str, Any]:
    from tests.benchmarks import bench

    if row == "boundary":
        return bench.bench_boundary(1_000_000)
    if row == "armed":
        return bench.bench_armed(root, 2000, 3)
    if row == "supervisor":
        return bench.bench_supervisor(root, 20)
    if row == "containment":
        return bench.bench_containment(root, 6)
    if row == "drill":
        t1, r1 = bench._drill(1, root / "drill-1")
        assert r1.ok, r1.text()
        attempts = [len(c.attempts) for c in r1.cases]
        tn = bench.naive_drill([c.schedule for c in r1.cases], attempts, 2, root / "naive")
        return {"drill_1_worker_s": t1, "naive_drill_s": tn, "harness_overhead_ratio": t1 / tn}
    if row == "prefork":
        return bench.bench_prefork(root)
    if row.startswith("runtime:"):
        return runtime_row(row.split(":", 1)[1], root)
    if row == "effects":
        from tests.benchmarks.effects import bench_effects

        return bench_effects(quick=True)
    if row == "growth":
        from tests.benchmarks.growth import bench_growth

        return bench_growth(quick=True)
    if row == "pytest":
        from tests.benchmarks.pytest_route import bench_pytest_route

        return bench_pytest_route(root, 1)
    raise ValueError(row)


def measure_main(row: str, tree: Path, out: Path) -> int:
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(tree)] + [p for p in sys.path if Path(p or ".").resolve() != here]
    os.chdir(tree)
    with tempfile.TemporaryDirectory(prefix="killdrill-bench-compare-") as root:
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        figures = measure(row, Path(root))
    numbers = {k: float(v) for k, v in figures.items() if isinstance(v, (int, float))}
    numbers["_seconds"] = time.perf_counter() - t0
    numbers["_load"] = load
    out.write_text(json.dumps(numbers))
    return 0


# ------------------------------------------------------------------ the rounds


def run_one(tree: Path, row: str) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    try:
        argv = [str(tree / ".venv" / "bin" / "python"), __file__, "--measure", row, "--tree", str(tree)]
        proc = subprocess.run([*argv, "--out", str(out)], cwd=tree, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
            return {"_error": 1.0, "_why": tail[0]}  # type: ignore[dict-item]
        figures: dict[str, float] = json.loads(out.read_text())
        return figures
    finally:
        out.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path, nargs="?")
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help=f"rows (default: {' '.join(ROWS)})")
    parser.add_argument("--json", type=Path, help="every measurement, and the table's figures")
    parser.add_argument("--jsonl", type=Path, help="each measurement as it ends, one JSON line each")
    parser.add_argument("--stop-after", type=float, default=0, help="start no round after this many seconds")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        return measure_main(args.measure, args.tree.resolve(), args.out)
    if not (args.before and args.after):
        parser.error("BEFORE and AFTER are required")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for rnd in range(1, args.rounds + 1):
        if args.stop_after and rnd > 1 and time.monotonic() - t0 > args.stop_after:
            print(f"round {rnd} not started: --stop-after {args.stop_after:.0f} s", file=sys.stderr)
            break
        order = ["before", "after"] if rnd % 2 else ["after", "before"]
        for row in args.rows:
            for label in order:
                figures = run_one(trees[label], row)
                runs.append({"round": rnd, "row": row, "tree": label, "figures": figures})
                if args.jsonl:
                    with args.jsonl.open("a") as f:
                        f.write(json.dumps(runs[-1]) + "\n")
                took = figures.get("_seconds", 0.0)
                err = f" ERROR {figures.get('_why')}" if "_error" in figures else ""
                print(f"round {rnd} {row} {label}: {took:.0f} s, load {figures.get('_load', 0):.1f}{err}",
                      file=sys.stderr, flush=True)  # fmt: skip
    table = summarize(runs)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "table": table}, indent=2))
    return 0


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per figure: the median of each tree's values and the median of the rounds' ratios."""
    by: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
    for r in runs:
        by.setdefault((r["row"], r["round"]), {})[r["tree"]] = r["figures"]
    table: dict[tuple[str, str], dict[str, list[float]]] = {}
    for (row, _), pair in by.items():
        if len(pair) != 2:
            continue
        for name, b in pair["before"].items():
            a = pair["after"].get(name)
            if a is None or (name.startswith("_") and name != "_seconds"):
                continue
            cell = table.setdefault((row, name), {"before": [], "after": [], "ratio": []})
            cell["before"].append(b)
            cell["after"].append(a)
            if b:
                cell["ratio"].append(a / b)
    out = []
    print(f"{'row':<22} {'figure':<44} {'before':>12} {'after':>12} {'after/before':>12}  rounds")
    for (row, name), cell in table.items():
        med = {k: statistics.median(v) if v else float("nan") for k, v in cell.items()}
        ratios = " ".join(f"{x:.2f}" for x in cell["ratio"])
        values = f"{med['before']:>12.4g} {med['after']:>12.4g} {med['ratio']:>12.3f}"
        print(f"{row:<22} {name:<44} {values}  {ratios}")
        out.append({"row": row, "figure": name, **med, "ratios": cell["ratio"]})
    return out


if __name__ == "__main__":
    sys.exit(main())
