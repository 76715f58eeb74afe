"""Time per case of a drill on each runtime and framework, beside LangGraph's.

    python -m tests.benchmarks.runtimes [--json FILE]     (also a row of ``python -m tests.benchmarks``)

Each bundled framework example is drilled at the same three kinds of point around its charging
step, one after the other in one run on the same machine: ``before:STEP`` (the resume does it
all), ``during:payments.charge`` (the provider made the charge, the step never returned) and
``committed:STEP`` (the framework recorded it; LlamaIndex: the user's save after the step,
``committed:checkpoint#2``).  ``STEP`` is the step, activity, tool, task or method that charges,
as each integration names it.  Attempts are forked from a warm template (``--launcher fork``);
discovery (two clean runs) is timed apart.  Beside each case runs its floor
(tests/benchmarks/floors.py: the case's two runs as plain processes, no harness), interleaved.
Printed per framework: discovery seconds, seconds per case, the floor's seconds per case, their
ratio (goal: at most 1.25) and the ratio to LangGraph's seconds per case.  A framework that is
not importable here is reported as such (CrewAI lives in a venv of its own: it pins
``openai<3``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Runtime:
    """One framework example and the points drilled on it."""

    name: str
    module: str  # what must import for the row to run
    command: tuple[str, ...]
    step: str  # the charging step as the integration names it
    options: dict[str, Any] = field(default_factory=dict)
    commit: str = ""  # the point where the framework made the step durable, if not committed:STEP

    @property
    def points(self) -> tuple[str, ...]:
        return (f"before:{self.step}", "during:payments.charge", self.commit or f"committed:{self.step}")


def _m(module: str, *args: str) -> tuple[str, ...]:
    return ("python", "-m", f"killdrill.examples.{module}", "--thread", "{thread}", *args)


def runtimes() -> list[Runtime]:
    """LangGraph first (the reference), then the durable runtimes and the agent frameworks."""
    from killdrill import examples as ex

    openai_agents: dict[str, Any] = {}
    if hasattr(ex, "BILLING_OPENAI_AGENTS"):
        openai_agents = {
            "http_fakes": True,
            "smtp_fake": True,
            "env": ex.BILLING_OPENAI_AGENTS_ENV,
            "model_script": ex.BILLING_OPENAI_AGENTS_SCRIPT,
            "preload": ex.BILLING_OPENAI_AGENTS_PRELOAD,
        }
    return [
        Runtime(
            "langgraph",
            "langgraph",
            _m("settlement_langgraph", "--db", "{workdir}/ckpt.sqlite", "--durability", "sync"),
            "charge_customer",
            {"integrations": ("langgraph",), "launcher": "fork"},
        ),
        Runtime(
            "dbos",
            "dbos",
            _m("payout_dbos", "--workdir", "{workdir}"),
            "charge",
            {
                "integrations": ("dbos",),
                "launcher": "fork",
                "preload": ("dbos", "killdrill.examples.payout_dbos"),
            },
        ),
        Runtime(
            "temporal",
            "temporalio",
            _m("payout_temporal"),
            "charge_customer",
            {
                "integrations": ("temporal",),
                "launcher": "fork",
                "preload": ("killdrill.examples.payout_temporal",),
            },
        ),
        Runtime(
            "openai_agents",
            "agents",
            _m("billing_openai_agents", "--db", "{workdir}/session.sqlite"),
            "charge_card",
            {"integrations": ("openai_agents",), "launcher": "fork", **openai_agents},
        ),
        Runtime(
            "llama_index",
            "workflows",
            _m("ticket_llama_index", "--workdir", "{workdir}"),
            "charge",
            {"integrations": ("llama_index",), "launcher": "fork", "preload": ("workflows",)},
            commit="committed:checkpoint#2",  # the user's save of the context after the charge
        ),
        Runtime(
            "celery",
            "celery",
            (
                "python",
                "-m",
                "killdrill.examples.checkout_celery",
                "drive",
                "--thread",
                "{thread}",
                "--workdir",
                "{workdir}",
            ),
            "checkout",
            {
                "integrations": ("celery",),
                "launcher": "fork",
                "preload": ("killdrill.examples.checkout_celery",),
            },
        ),
        Runtime(
            "crewai",
            "crewai",
            _m("onboarding_crewai", "--workdir", "{workdir}"),
            "charge_first_month",
            {"integrations": ("crewai",), "launcher": "fork"},
        ),
    ]


def bench_one(rt: Runtime, root: Path, rounds: int = 1) -> dict[str, Any]:
    """Discovery (two clean runs), then each point's case and its floor (the same two runs as
    plain processes, tests/benchmarks/floors.py), interleaved: drill then floor on odd rounds,
    floor then drill on even ones.  Verdicts checked, not assumed."""
    from killdrill.drill import Drill, DrillOptions
    from tests.benchmarks.floors import floor_case

    if importlib.util.find_spec(rt.module) is None:
        return {"skipped": f"{rt.module} is not importable here"}
    # Two clean runs (the default): one cannot tell a thread-derived field (the LangGraph example's
    # receipt ref) from a recomputed one, and a correct example would read as violated.
    options = DrillOptions(root=root / rt.name, cwd=str(REPO), timeout=60, **rt.options)
    with Drill(rt.command, options) as drill:
        t0 = time.perf_counter()
        catalogue = drill.points()
        t1 = time.perf_counter()
        missing = [p for p in rt.points if p not in catalogue]
        if missing:
            return {"skipped": f"points not in the catalogue: {missing}", "discovery_s": t1 - t0}
        cases, case_s, floor_s, floors_ok = [], 0.0, 0.0, True
        for r in range(rounds):
            for p in rt.points:
                for which in ("drill", "floor") if r % 2 == 0 else ("floor", "drill"):
                    if which == "floor":
                        f = floor_case(drill, rt.options["integrations"][0], rt.command, p, root)
                        floor_s += f["s"]
                        floors_ok = floors_ok and f["ok"]
                        continue
                    c0 = time.perf_counter()
                    cases.append(drill.run_case(p))
                    case_s += time.perf_counter() - c0
    return {
        "launcher": rt.options.get("launcher", "spawn"),
        "discovery_s": t1 - t0,
        "cases": len(cases),
        "case_s": case_s / len(cases),
        "floor_s": floor_s / len(cases),
        "floors_ok": floors_ok,
        "attempts": sum(len(c.attempts) for c in cases),
        # the harness's own phases (killdrill/drill/phases.py), and the runtime's waits, per case
        "harness_s": sum(v for c in cases for k, v in c.phases.items() if k in HARNESS) / len(cases),
        "waits_s": sum(w["seconds"] for c in cases for w in c.waits) / len(cases),
        "verdicts_ok": all(c.ok for c in cases),
        "points": list(rt.points),
    }


def bench_runtimes(root: Path, only: Sequence[str] = (), rounds: int = 1) -> dict[str, Any]:
    """The row: per runtime its figures, ``runtime_NAME_floor_ratio`` (s/case over its floor's) and
    ``runtime_NAME_case_ratio`` (over LangGraph's s/case)."""
    rows: dict[str, dict[str, Any]] = {}
    for rt in runtimes():
        if only and rt.name not in only and rt.name != "langgraph":
            continue
        rows[rt.name] = bench_one(rt, root, rounds)
        print(f"  runtimes: {rt.name} done", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"runtimes_load_average": os.getloadavg()[0]}
    ref = rows.get("langgraph", {}).get("case_s")
    for name, row in rows.items():
        if "skipped" in row:
            out[f"runtime_{name}"] = f"n/a: {row['skipped']}"
            continue
        out[f"runtime_{name}_discovery_s"] = row["discovery_s"]
        out[f"runtime_{name}_case_s"] = row["case_s"]
        out[f"runtime_{name}_floor_s"] = row["floor_s"]
        out[f"runtime_{name}_floor_ratio"] = row["case_s"] / row["floor_s"]
        out[f"runtime_{name}_harness_s"] = row["harness_s"]
        out[f"runtime_{name}_waits_s"] = row["waits_s"]
        if ref:
            out[f"runtime_{name}_case_ratio"] = row["case_s"] / ref
        if not row["verdicts_ok"]:
            out[f"runtime_{name}_verdicts"] = "VIOLATED (a correct example: see the drill)"
        if not row["floors_ok"]:
            out[f"runtime_{name}_floor"] = "a floor run did not end as planned (killed, then exit 0)"
    out["runtimes_table"] = "\n" + render(rows, ref)  # printed under its name by tests.benchmarks
    return out


HARNESS = ("setup", "launch", "teardown", "restart", "verdict", "release")
"""A case's phases that are killdrill's own work (the others are the agent's and its runtime's)."""

FLOOR_GOAL = 1.25
"""A case may cost at most this many times its floor."""


def render(rows: dict[str, dict[str, Any]], ref: float | None) -> str:
    lines = [
        f"runtime        discovery  s/case  floor s/case  x floor (goal <= {FLOOR_GOAL})"
        "  x LangGraph  killdrill's part  runtime waits  verdicts"
    ]
    for name, row in rows.items():
        if "skipped" in row:
            lines.append(f"{name:<14} n/a: {row['skipped']}")
            continue
        ratio = f"{row['case_s'] / ref:.2f}" if ref else "-"
        floor = row["case_s"] / row["floor_s"]
        ok = "exactly-once" if row["verdicts_ok"] else "VIOLATED"
        lines.append(
            f"{name:<14} {row['discovery_s']:>8.1f}s {row['case_s']:>6.2f}s "
            f"{row['floor_s']:>12.2f}s {floor:>8.2f} {'ok' if floor <= FLOOR_GOAL else 'OVER':<16}"
            f"{ratio:>11} {row['harness_s']:>16.3f}s {row['waits_s']:>13.2f}s"
            f"  {ok} ({row['cases']} cases: {', '.join(row['points'])})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.runtimes", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--only", nargs="*", default=(), help="runtimes to run (LangGraph always runs)")
    parser.add_argument("--rounds", type=int, default=1, help="cases per point (each beside its floor)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="killdrill-bench-runtimes-"))
    load0 = os.getloadavg()
    try:
        figures = bench_runtimes(root, args.only, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(figures.pop("runtimes_table").strip("\n"))
    print(f"load average at start {load0[0]:.2f}, at end {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if all(not str(k).endswith("_verdicts") for k in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
