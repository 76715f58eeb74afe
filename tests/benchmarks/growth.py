"""The growth curve's other rows: the catalogue and a chaos job as they grow.

    python -m tests.benchmarks.growth [--quick] [catalogue] [chaos]

**Catalogue** (``tests/agents/basic/many_steps.py``, N steps = N nodes, 10 .. 1,000): real
discovery (two clean runs, fork launcher) per point; a real drill of a sample of 4 points per N
(a full 1,000-point drill is ~2,000 attempts: too long for a benchmark row), the case's harness
time over its attempts' time, the median of 3 runs of each point's case, the largest of the 4
points after the drill's first case (``_first_``: the one-time imports of the verdict and the
report, paid once per drill; ``_worst_run``: the largest single run, no goal); the text and JSON report
of a drill of N cases (the sampled cases repeated to N: synthetic, rendering only), the median
of seven renders.
Goals: discovery per point and report per case flat (the ratio largest vs smallest, for the
report vs the first size past 60, under 2), the case overhead ratio under 0.5 at every N.  The
report rows: the text and the JSON per case, and the report's size per case; their ``_growth``
from the first size past ``records.FULL_CLEAN_CASES`` (60: the clean cases a drill's JSON keeps
in full, N calls and N boundaries each; later clean ones are abridged, so the report is linear
in N past it; before, every case was in full and the JSON was O(N^2): 32 MB at 300 points, over
4 GB at 1,000).

**Chaos job** (100 .. 10,000 runs; synthetic: the runs are clean cases of a small ledger built
in memory, not run, since 10,000 real runs take hours): ``report.json``, ``junit.xml`` and
``report.html`` written as the job writes them at its end; the harness's allocation peak
(``tracemalloc``: each run recorded as the job records it, ``runs.jsonl`` as it finishes, then
the report files written from it) and each file's size; the record and report times from a pass
of their own (``tracemalloc`` slows allocation ~5x: 17 s for 10,000 runs' reports that take
3).  Goals: memory flat (the peak at 10,000 runs under 1.5x the peak at 1,000; before the
stream the job kept every case with its ledger), ``report.html`` bounded (at 10,000 runs under
5 MB and under 3x its size at 1,000).
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.benchmarks.goals import Goal, line

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = (10, 100, 1_000)
CHAOS = (100, 1_000, 10_000)
RUNS_PER_POINT = 3
"""Each sampled point's case is drilled this often, and its overhead is the median: a 10-point
case's attempts take ~50 ms, so one scheduler hiccup of 10 ms in one run moved the row by 0.2
(0.44 to 0.69 between two runs of session 9, medians 0.39-0.47)."""


def bench_catalogue(sizes: tuple[int, ...] = CATALOGUE) -> dict[str, Any]:
    from killdrill.drill import Drill, DrillOptions

    out: dict[str, Any] = {"catalogue_load_average": os.getloadavg()[0]}
    for n in sizes:
        root = Path(tempfile.mkdtemp(prefix=f"killdrill-bench-cat{n}-"))
        command = [sys.executable, "tests/agents/basic/many_steps.py", "--thread", "{thread}"]
        command += ["--ckpt", "{workdir}/ckpt.json", "--steps", str(n)]
        drill = Drill(command, DrillOptions(root=root, cwd=str(REPO), launcher="fork"))
        t0 = time.perf_counter()
        disc = drill.discover()
        took = time.perf_counter() - t0
        points = len(disc.catalogue)
        out[f"catalogue_{n}_points"] = points
        out[f"catalogue_{n}_discovery_s"] = took
        out[f"catalogue_{n}_discovery_ms_per_point"] = 1e3 * took / points
        sample = [disc.catalogue[int(k * (points - 1) / 3)].label for k in range(4)]
        cases, ratios = [], []
        t0 = time.perf_counter()
        first = drill.run_case(sample[0])  # the drill's first case also pays its one-time imports
        wall, attempts = time.perf_counter() - t0, sum(a.duration_ms for a in first.attempts) / 1000
        out[f"catalogue_{n}_first_case_overhead_ratio"] = (wall - attempts) / attempts
        worst = 0.0
        for label in sample:
            runs = []
            for _ in range(RUNS_PER_POINT):
                t0 = time.perf_counter()
                case = drill.run_case(label)
                wall = time.perf_counter() - t0
                assert case.ok, case.text()
                attempts = sum(a.duration_ms for a in case.attempts) / 1000
                runs.append((wall - attempts) / attempts)
            ratios.append(statistics.median(runs))
            worst = max(worst, *runs)
            cases.append(case)
        print(
            f"catalogue {n}: {points} points, discovery {out[f'catalogue_{n}_discovery_s']:.1f} s", flush=True
        )
        out[f"catalogue_{n}_case_overhead_ratio"] = max(ratios)
        out[f"catalogue_{n}_case_overhead_ratio_worst_run"] = worst
        out.update(_report_rows(n, disc, cases))
        drill.close()
        shutil.rmtree(root, ignore_errors=True)
    first, last = sizes[0], sizes[-1]
    out["catalogue_discovery_growth"] = (
        out[f"catalogue_{last}_discovery_ms_per_point"] / out[f"catalogue_{first}_discovery_ms_per_point"]
    )
    out.update(_report_growth(out, sizes))
    return out


def _report_rows(n: int, disc: Any, cases: list[Any]) -> dict[str, float]:
    """The text and JSON report of a drill of ``disc``'s N points (the sampled cases repeated)."""
    from killdrill.records import DrillResult
    from killdrill.report.drill import render_drill
    from killdrill.report.jsonfile import dumps

    many = tuple(replace(cases[i % len(cases)], schedule=e.label) for i, e in enumerate(disc.catalogue))
    result = DrillResult(disc, many)
    render_drill(DrillResult(disc, many[:2]))  # warm: the first render pays imports, not N
    dumps(DrillResult(disc, many[:2]).to_dict())
    texts, jsons = [], []
    # The median of seven: one render of 100 cases is 16-29 ms from one run to the next, and with
    # three the growth row (two such figures divided) gave 2.2x and 1.15x ten minutes apart.
    for _ in range(7):
        t0 = time.perf_counter()
        text = render_drill(result)
        t1 = time.perf_counter()
        data = dumps(result.to_dict())
        t2 = time.perf_counter()
        texts.append(t1 - t0)
        jsons.append(t2 - t1)
    took_text, took_json = statistics.median(texts), statistics.median(jsons)
    size = (len(text) + len(data)) / 1024
    return {
        f"catalogue_{n}_report_ms_per_case": 1e3 * (took_text + took_json) / len(many),
        f"catalogue_{n}_report_text_ms_per_case": 1e3 * took_text / len(many),
        f"catalogue_{n}_report_json_ms_per_case": 1e3 * took_json / len(many),
        f"catalogue_{n}_report_kb": size,
        f"catalogue_{n}_report_kb_per_case": size / len(many),
    }


def _report_growth(out: dict[str, Any], sizes: tuple[int, ...]) -> dict[str, float]:
    """Per-case report cost, largest N over the first N past ``FULL_CLEAN_CASES`` (and over the
    smallest, for the record)."""
    from killdrill.records import FULL_CLEAN_CASES

    first, last = sizes[0], sizes[-1]
    past = next((n for n in sizes if n > FULL_CLEAN_CASES), first)
    rows = {}
    for name, unit in (("report", "ms"), ("report_json", "ms"), ("report_text", "ms"), ("report", "kb")):
        label = f"catalogue_{name}{'_kb' if unit == 'kb' else ''}_growth"
        rows[label] = (
            out[f"catalogue_{last}_{name}_{unit}_per_case"] / out[f"catalogue_{past}_{name}_{unit}_per_case"]
        )
    rows["catalogue_report_growth_from_smallest"] = (
        out[f"catalogue_{last}_report_ms_per_case"] / out[f"catalogue_{first}_report_ms_per_case"]
    )
    return rows


def _chaos_runs(runs: int) -> tuple[Any, Any]:
    """The discovery and a generator of ``runs`` finished runs (1 in 50 violated), as a job gets
    them: each case made when its run ends, gone once the job has recorded it."""
    from killdrill.chaos.report import RunRecord
    from killdrill.records import (
        Attempt,
        Call,
        CaseResult,
        CatalogueEntry,
        CleanRun,
        Discovery,
        LedgerSnapshot,
        TraceEvent,
        Violation,
    )

    labels = [f"before:step_{i:02d}" for i in range(10)]
    cat = tuple(CatalogueEntry(lb, lb, 1, float(i)) for i, lb in enumerate(labels))
    calls = tuple(
        Call(
            i,
            "payments",
            "charge",
            f"{{thread}}:{i}",
            {"account": f"a{i}", "amount": i},
            "created",
            None,
            1,
            1,
            0,
        )
        for i in range(10)
    )
    ledger = LedgerSnapshot(calls=calls)
    disc = Discovery(("agent",), cat, ledger, runs=(CleanRun("t0", cat, ledger),))

    def finished() -> Any:
        for i in range(runs):
            kill = labels[i % 10]
            trace = tuple(TraceEvent(lb, 1, float(k), 1) for k, lb in enumerate(labels[: i % 10 + 1]))
            attempts = (
                Attempt(1, kill, "killed", -9, 100.0, trace, killed_at=kill),
                Attempt(2, None, "exited", 0, 100.0, trace),
            )
            bad = i % 50 == 0
            violations = (
                (Violation("duplicate_effect", "payments.charge landed 2 times", "payments", "charge"),)
                if bad
                else ()
            )
            case = CaseResult(
                ("agent",), kill, f"t{i}", f"/w/{i}", attempts, violations, ledger=ledger, reproduce="x"
            )
            yield RunRecord.of(i, case, 0.2), case

    return disc, finished()


def bench_chaos(sizes: tuple[int, ...] = CHAOS) -> dict[str, Any]:
    """A job's harness memory as its runs grow: each run recorded as the job records it
    (killdrill.chaos.stream: runs.jsonl as it finishes), then its three report files written."""
    from killdrill.chaos.stream import RunStream

    header = {"seed": 1, "shard": "1/1", "command": ["agent"]}
    out: dict[str, Any] = {"chaos_load_average": os.getloadavg()[0]}
    for n in sizes:
        for traced in (True, False):  # the memory traced, then the time in a pass of its own
            folder = Path(tempfile.mkdtemp(prefix=f"killdrill-bench-chaos{n}-"))
            gc.collect()
            if traced:
                tracemalloc.start()
            t0 = time.perf_counter()
            disc, finished = _chaos_runs(n)
            stream = RunStream(disc, folder)
            for rec, case in finished:
                stream.add(rec, case)
            t1 = time.perf_counter()
            stream.write_reports(folder, header, [])
            t2 = time.perf_counter()
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                out[f"chaos_{n}_harness_mb"] = peak / 2**20
                out[f"chaos_{n}_harness_kb_per_run"] = peak / 1024 / n
                for name in ("report.json", "junit.xml", "report.html", "runs.jsonl"):
                    out[f"chaos_{n}_{name.replace('.', '_')}_mb"] = (folder / name).stat().st_size / 2**20
            else:
                out[f"chaos_{n}_record_ms_per_run"] = 1e3 * (t1 - t0) / n
                out[f"chaos_{n}_report_s"] = t2 - t1
            stream.close()
            shutil.rmtree(folder, ignore_errors=True)
    first, last = sizes[0], sizes[-1]
    out["chaos_memory_per_run_growth"] = (
        out[f"chaos_{last}_harness_kb_per_run"] / out[f"chaos_{first}_harness_kb_per_run"]
    )
    mid = sizes[-2] if len(sizes) > 1 else first
    out["chaos_memory_growth"] = out[f"chaos_{last}_harness_mb"] / out[f"chaos_{mid}_harness_mb"]
    out["chaos_html_growth"] = out[f"chaos_{last}_report_html_mb"] / out[f"chaos_{mid}_report_html_mb"]
    return out


GOALS = {
    "catalogue_discovery_growth": Goal("<", 2.0),
    "catalogue_report_growth": Goal("<", 2.0),
    "catalogue_report_json_growth": Goal("<", 2.0),
    "catalogue_report_kb_growth": Goal("<", 2.0),
    **{f"catalogue_{n}_case_overhead_ratio": Goal("<", 0.5) for n in CATALOGUE},
    "chaos_memory_growth": Goal("<", 1.5),
    "chaos_10000_report_html_mb": Goal("<", 5.0),
    "chaos_html_growth": Goal("<", 3.0),
}


def bench_growth(quick: bool = False, which: tuple[str, ...] = ("catalogue", "chaos")) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "catalogue" in which:
        out.update(bench_catalogue(CATALOGUE[:2] if quick else CATALOGUE))
    if "chaos" in which:
        out.update(bench_chaos(CHAOS[:2] if quick else CHAOS))
    return out


if __name__ == "__main__":
    which = tuple(a for a in sys.argv[1:] if a in ("catalogue", "chaos")) or ("catalogue", "chaos")
    for name, value in bench_growth("--quick" in sys.argv, which).items():
        print(line(name, value, GOALS))
