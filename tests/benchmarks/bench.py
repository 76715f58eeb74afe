"""The benchmark: every figure measured in the same run, on the same machine, printed and saved.

    python -m tests.benchmarks [--json FILE] [--quick]

Figures (``name: value`` lines, and the same names in JSON):
- ``boundary_unarmed_ns`` vs ``empty_call_ns``: the agent-side cost outside a drill.
- ``boundary_armed_median_us`` / ``_p99_us``: one armed round trip (agent -> supervisor -> agent);
  ``boundary_one_way_median_us``: a point the attempt's kill is not at (sent, not answered).
- ``supervisor_overhead_ms``: per attempt (spawn, channel, kill, reap, ledger read) beyond the
  same attempt launched bare (``subprocess.run``, self-kill at the same point); the median of
  paired differences.
- ``containment_cost_ratio``: the same supervised attempt with its keeper (killdrill.process.containment)
  over without one (plain spawn through ``setpriv --pdeathsig``, then the environment sweep:
  the launch before keepers), interleaved.
- ``harness_overhead_ratio``: a full drill of the example vs the naive hand-written drill doing
  the same launches (``subprocess.run`` loop, self-kill flag, no trace, no verdict).
- ``parallel_speedup``: the same drill with 1 and 2 workers.
- ``prefork_speedup``: a full drill of the LangGraph example, plain spawn vs the pre-forking
  launcher (``DrillOptions(launcher="fork")``), with whether the verdicts were identical;
  without a launcher or langgraph it says so instead of giving a number.  Goal: at least 20.

Every row with a goal is printed with it: ``prefork_speedup: 14.812  (goal >= 20: MISSED)``
(:mod:`tests.benchmarks.goals`).
- ``runtime_NAME_case_s`` / ``_case_ratio`` / ``_discovery_s``: three cases around the charging step
  of each bundled framework example (LangGraph, DBOS, Temporal, OpenAI Agents, LlamaIndex, CrewAI
  where importable), fork launcher, and the ratio to LangGraph's s/case: see
  :mod:`tests.benchmarks.runtimes`.
- ``effects_N[_stamped]_case_s`` / ``_us_per_effect`` / ``_harness_mb``: one case of a payout batch
  of N = 10^2 .. 10^5 effects judged (discovery's matching, the checks, the report's ledger):
  see :mod:`tests.benchmarks.effects` (``real_N_*``: a real payout-batch case, ``--real N`` there).
- ``catalogue_*`` (10 .. 1,000 points: discovery, the drill, the text and JSON report) and
  ``chaos_*`` (100 .. 10,000 runs: harness memory, report files): :mod:`tests.benchmarks.growth`.

- ``deploy_*``: a served topology (``--serve`` service + driver) per case beside a one-command
  agent of the same work, clean and killed, and the service's readiness wait
  (tests/benchmarks/deployment.py).

``--only effects growth real pytest deploy``: just those rows (the full run takes long on a loaded machine).
- Not in this run (it takes ~10 min quiet): ``python -m tests.benchmarks.deployed --workers``, the
  bundled DBOS, Temporal and Celery deployments and the Temporal 3 s start-to-close agent per case
  beside two plain runs of their topology, spawned and forked, and ``--workers 2`` over one.
- ``pytest_cli_ratio_serial`` / ``_2_workers`` / ``_spawn`` / ``_2_workers_spawn``: the pytest
  route over the CLI on the same cases, pairs side by side (tests/benchmarks/pytest_route.py; alone:
  ``python -m tests.benchmarks.pytest_route``); the 2-worker rows are ``--killdrill-workers=2``,
  with ``pytest -n 2``'s beside them (``_xdist``, no goal: xdist's own start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import uuid
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from killdrill.examples import SETTLEMENT
from tests.benchmarks.effects import GOALS as EFFECT_GOALS
from tests.benchmarks.effects import bench_effects, bench_real
from tests.benchmarks.goals import Goal, line
from tests.benchmarks.growth import GOALS as GROWTH_GOALS
from tests.benchmarks.growth import bench_growth
from tests.benchmarks.runtimes import bench_runtimes

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

# A tiny agent: one boundary per call of the loop, each call timed inside the agent.
_ARMED_AGENT = """
import sys, time, killdrill
n = int(sys.argv[1]); out = []
for i in range(n):
    t = time.perf_counter_ns(); killdrill.boundary("before:tick"); out.append(time.perf_counter_ns() - t)
open(sys.argv[2], "w").write(" ".join(map(str, out)))
"""
# A small attempt: import killdrill and the fakes, record one effect, stop at a boundary.
_ATTEMPT_AGENT = """
import os, signal, sys, killdrill
from killdrill.fakes import connect
connect().kv.set("k", 1)
if os.environ.get("SELF_KILL"):
    os.kill(os.getpid(), signal.SIGKILL)
killdrill.boundary("before:stop")
"""


def _empty(point: str) -> None:
    """The baseline: a call with the same argument that does nothing."""


def bench_boundary(loops: int) -> dict[str, float]:
    """Unarmed ``boundary()`` against an empty function call, best of 7 (ns per call)."""
    import killdrill.agent as agent

    saved = os.environ.pop("KILLDRILL_CONTROL", None)
    agent._after_fork_in_child()  # forget the environment read so far
    try:
        agent.boundary("before:warm")
        g = {"boundary": agent.boundary, "empty": _empty}
        empty = min(timeit.repeat("empty('before:x')", globals=g, repeat=7, number=loops))
        unarmed = min(timeit.repeat("boundary('before:x')", globals=g, repeat=7, number=loops))
    finally:
        if saved is not None:
            os.environ["KILLDRILL_CONTROL"] = saved
        agent._after_fork_in_child()  # forget the environment read so far
    e, u = empty / loops * 1e9, unarmed / loops * 1e9
    return {"empty_call_ns": e, "boundary_unarmed_ns": u, "boundary_unarmed_vs_empty": u / e}


def _spec(workdir: Path, argv: Sequence[str], kill: str | None, number: int = 1) -> Any:
    from killdrill.points import parse_fault
    from killdrill.process.supervisor import LaunchSpec

    state = workdir / ".killdrill"
    state.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
    env.update(
        KILLDRILL_THREAD="bench",
        KILLDRILL_WORKDIR=str(workdir),
        KILLDRILL_LEDGER=str(state / "ledger.sqlite"),
    )
    return LaunchSpec(
        argv=list(argv),
        env=env,
        cwd=str(REPO),
        stdout_path=str(state / f"a{number}.out"),
        stderr_path=str(state / f"a{number}.err"),
        number=number,
        fault=parse_fault(kill) if kill else None,
        timeout_s=120,
        control_dir=str(state / "ctl"),
    )


def _armed_run(spec: Any) -> Any:
    """One attempt under a supervisor, its own fault (a kill) acted out by its nemesis."""
    from killdrill.faults.kinds import Scene, nemeses
    from killdrill.process.supervisor import Supervisor

    return Supervisor(faults=nemeses([spec], Scene())).run(spec)


def bench_armed(root: Path, n: int, runs: int = 5) -> dict[str, float]:
    """Armed round trip, timed in the agent around each ``boundary()`` call.

    ``runs`` attempts of ``n`` calls: the figure is the median of their medians.  Where the
    scheduler places the agent and the supervisor (one core or two, on 2 shared vCPUs) moves a
    whole attempt's median several-fold (measured 50 to 730 us in three consecutive attempts of
    the same code), so one attempt is one sample, not a measurement; the spread is reported too.
    ``_armed_``: the attempt's kill is at this point (an occurrence it never reaches), so every
    call waits for the supervisor's answer; ``_one_way_``: no kill at it, every call but the
    connection's first sends and goes on.  Attempt by attempt, in alternating order.
    """

    kills = {"armed": f"before:tick#{n + 1}", "one_way": None}
    samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in kills}
    calls = 0
    for i in range(runs):
        for name in kills if i % 2 == 0 else reversed(list(kills)):
            wd = root / f"{name}-{i}"
            out = wd / "lat.txt"
            attempt = _armed_run(_spec(wd, [PY, "-c", _ARMED_AGENT, str(n), str(out)], kills[name]))
            assert attempt.returncode == 0, attempt.stderr_tail
            assert len(attempt.trace) == n, (name, len(attempt.trace))  # every call traced either way
            lat = sorted(int(x) / 1000 for x in out.read_text().split()[1:])  # drop the connect
            samples[name][0].append(statistics.median(lat))
            samples[name][1].append(lat[int(len(lat) * 0.99) - 1])
            calls += len(lat) if name == "armed" else 0
    armed, one_way = samples["armed"], samples["one_way"]
    return {
        "boundary_armed_median_us": statistics.median(armed[0]),
        "boundary_armed_median_min_us": min(armed[0]),
        "boundary_armed_median_max_us": max(armed[0]),
        "boundary_armed_p99_us": statistics.median(armed[1]),
        "boundary_armed_calls": float(calls),
        "boundary_one_way_median_us": statistics.median(one_way[0]),
        "boundary_one_way_p99_us": statistics.median(one_way[1]),
    }


def bench_supervisor(root: Path, reps: int) -> dict[str, float]:
    """Per attempt: supervised (kill at a point + ledger read) minus bare (self-kill).

    Each pair runs back to back, in alternating order, and the figure is the median of the
    pairs' differences: an attempt is ~120 ms of interpreter start whose jitter (several ms on
    2 shared cores) swamps a difference of medians taken apart.
    """
    from killdrill.ledger import Ledger

    argv = [PY, "-c", _ATTEMPT_AGENT]

    def supervised(i: int) -> float:
        wd = root / f"sup-{i}"
        t = time.perf_counter()
        a = _armed_run(_spec(wd, argv, "before:stop"))
        Ledger(str(wd / ".killdrill" / "ledger.sqlite"), "bench").snapshot()
        took = time.perf_counter() - t
        assert a.killed_at == "before:stop", a
        return took

    def bare(i: int) -> float:
        spec = _spec(root / f"bare-{i}", argv, None)
        t = time.perf_counter()
        with open(spec.stdout_path, "wb") as o, open(spec.stderr_path, "wb") as e:
            subprocess.run(
                argv, env={**spec.env, "SELF_KILL": "1"}, stdout=o, stderr=e, start_new_session=True
            )
        return time.perf_counter() - t

    supervised(-1)  # the warden and the first ledger open are once per harness, not per attempt
    sup, plain = [], []
    for i in range(reps):
        if i % 2:
            plain.append(bare(i))
            sup.append(supervised(i))
        else:
            sup.append(supervised(i))
            plain.append(bare(i))
    diffs = [s - b for s, b in zip(sup, plain, strict=True)]
    return {
        "supervisor_attempt_ms": statistics.median(sup) * 1000,
        "bare_attempt_ms": statistics.median(plain) * 1000,
        "supervisor_overhead_ms": statistics.median(diffs) * 1000,
    }


def bench_containment(root: Path, reps: int) -> dict[str, float]:
    """Per attempt, interleaved: under a keeper vs an uncontained launch."""
    import shutil as sh

    from killdrill.process import containment
    from killdrill.process.forks import warden

    setpriv = sh.which("setpriv")
    if not containment.supported() or setpriv is None:
        return {"containment_cost_ratio": "n/a: no keepers (or no setpriv) here"}  # type: ignore[dict-item]
    warden()  # started once per harness process: not part of an attempt
    argv = [PY, "-c", _ATTEMPT_AGENT]
    kept, bare = [], []
    supported = containment.supported
    for i in range(reps):
        t = time.perf_counter()
        a = _armed_run(_spec(root / f"kept-{i}", argv, "before:stop"))
        kept.append(time.perf_counter() - t)
        assert a.killed_at == "before:stop", a
        containment.supported = lambda: False  # type: ignore[assignment]
        try:
            t = time.perf_counter()
            a = _armed_run(
                _spec(root / f"unkept-{i}", [setpriv, "--pdeathsig", "KILL", "--", *argv], "before:stop")
            )
            bare.append(time.perf_counter() - t)
        finally:
            containment.supported = supported  # type: ignore[assignment]
        assert a.killed_at == "before:stop", a
    k, b = statistics.median(kept), statistics.median(bare)
    return {
        "contained_attempt_ms": k * 1000,
        "uncontained_attempt_ms": b * 1000,
        "containment_cost_ratio": k / b,
    }


def _drill(workers: int, root: Path, command: Sequence[str] = SETTLEMENT, **kw: Any) -> tuple[float, Any]:
    from killdrill.drill import Drill, DrillOptions

    t = time.perf_counter()
    d = Drill(command, DrillOptions(root=root, workers=workers, cwd=str(REPO), **kw))
    result = d.run_all()
    return time.perf_counter() - t, result


def naive_drill(labels: Sequence[str], attempts: Sequence[int], discovery_runs: int, root: Path) -> float:
    """The hand-written drill: the same launches, each a ``subprocess.run`` with a self-kill flag."""
    t = time.perf_counter()

    def launch(label: str, workdir: Path, thread: str) -> int:
        argv = [PY, "-m", "tests.benchmarks.selfkill", label, "--", "killdrill.examples.settlement"]
        argv += ["--thread", thread, "--db", str(workdir / "ckpt.sqlite")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")}
        env.update(KILLDRILL_LEDGER=str(workdir / "ledger.sqlite"), KILLDRILL_THREAD=thread)
        return subprocess.run(argv, env=env, cwd=REPO, capture_output=True).returncode

    for i in range(discovery_runs):
        wd = root / f"naive-discovery-{i}"
        wd.mkdir(parents=True)
        assert launch("", wd, f"nd-{i}") == 0
    for label, n in zip(labels, attempts, strict=True):
        wd = root / f"naive-{uuid.uuid4().hex[:8]}"
        wd.mkdir(parents=True)
        thread = f"n-{uuid.uuid4().hex[:8]}"
        assert launch(label, wd, thread) == -9, label
        for _ in range(n - 1):
            assert launch("", wd, thread) == 0, label
    return time.perf_counter() - t


LANGGRAPH = [
    "python", "-m", "killdrill.examples.settlement_langgraph",
    "--thread", "{thread}", "--db", "{workdir}/ckpt.sqlite", "--durability", "sync",
]  # fmt: skip


def bench_prefork(root: Path, rounds: int = 3) -> dict[str, Any]:
    """A full drill of the LangGraph example, plain spawn vs forked from a warm template, and the
    fork drill beside its floor (``fork_floor.py``: the same cases forked with no harness)."""
    import importlib.util

    from killdrill.drill import DrillOptions

    if (
        "launcher" not in {f.name for f in fields(DrillOptions)}
        or importlib.util.find_spec("langgraph") is None
    ):
        return {"prefork_speedup": "n/a: no pre-forking launcher (or no langgraph)"}
    ts, rs = _drill(1, root / "lg-spawn", command=LANGGRAPH, integrations=("langgraph",))
    # The fork drill and its floor alternate, `rounds` each: on shared cores a 6 s run moves by
    # more than the harness's share between two minutes, so only neighbours compare.
    forks: list[float] = []
    floors: list[float] = []
    rf = None
    for i in range(rounds):
        for side in ("fork", "floor") if i % 2 == 0 else ("floor", "fork"):
            if side == "fork":
                tf, rf = _drill(
                    1, root / f"lg-fork-{i}", command=LANGGRAPH, integrations=("langgraph",), launcher="fork"
                )
                forks.append(tf)
            else:
                floors.append(_fork_floor([c.schedule for c in rs.cases], ("langgraph",)))
    assert rf is not None
    tf = statistics.median(forks)
    tfloor = statistics.median(floors)
    # Case by case, by schedule: the catalogue's order is the first clean run's trace order, and
    # under load two points of different threads (a node's commit, the next checkpoint) can come
    # in either order, so the two drills may run the same cases in another order.
    spawned = {c.schedule: c for c in rs.cases}
    forked = {c.schedule: c for c in rf.cases}
    same = spawned.keys() == forked.keys() and all(spawned[k].kinds == forked[k].kinds for k in spawned)
    # A difference must be explainable afterwards: which cases, and what each failing case said.
    differ = [
        {
            "schedule": k,
            "spawn": list(s.kinds) if s is not None else "not run",
            "fork": list(f.kinds) if f is not None else "not run",
            "text": (s if s is not None and (s.kinds or f is None) else f).text(),  # type: ignore[union-attr]
        }
        for k in dict.fromkeys([*spawned, *forked])
        for s, f in ((spawned.get(k), forked.get(k)),)
        if s is None or f is None or s.kinds != f.kinds
    ]
    return {
        "langgraph_cases": len(rs.cases),
        "langgraph_drill_spawn_s": ts,
        "langgraph_drill_fork_s": tf,
        "langgraph_fork_floor_s": tfloor,
        "prefork_speedup": ts / tf,
        # what no harness could pass on this agent and machine: spawn over the fork floor
        "prefork_floor_speedup": ts / tfloor,
        "prefork_fork_over_floor": tf / tfloor,
        "prefork_fork_runs_s": [round(x, 3) for x in forks],  # every run, for the JSON
        "prefork_floor_runs_s": [round(x, 3) for x in floors],
        "prefork_identical_verdicts": same,
        "prefork_differences": differ,  # type: ignore[dict-item]
    }


def _fork_floor(schedules: Sequence[str], integrations: Sequence[str]) -> float:
    """Seconds for ``fork_floor.py`` to run these cases of the LangGraph example (each must be
    killed at its point and then resume to exit 0: a floor that skipped work would flatter)."""
    argv = [PY, "-m", "tests.benchmarks.fork_floor"]
    for name in integrations:
        argv += ["--integration", name]
    for schedule in schedules:
        argv += ["--point", schedule]
    t = time.perf_counter()
    proc = subprocess.run([*argv, "--", *LANGGRAPH], cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - t
    counts = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    if counts != {"cases": len(schedules), "killed": len(schedules), "resumed": len(schedules)}:
        raise RuntimeError(f"fork floor: {counts or proc.returncode}\n{proc.stderr[-1500:]}")
    return took


def run(quick: bool, only: Sequence[str] = ()) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="killdrill-bench-"))
    out: dict[str, Any] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()} {platform.release()}",
        "load_average_at_start": os.getloadavg()[0],
    }
    if only:  # the growth rows, on their own
        if "effects" in only:
            out.update(bench_effects(quick))
        if "real" in only:
            out.update(bench_real(1_000))
        if "growth" in only:
            out.update(bench_growth(quick))
        if "pytest" in only:
            from tests.benchmarks.pytest_route import bench_pytest_route

            out.update(bench_pytest_route(root, 1 if quick else 3))
        if "deploy" in only:
            from tests.benchmarks.deployment import bench_deployment

            out.update(bench_deployment(root, 1 if quick else 3))
        out["load_average_at_end"] = os.getloadavg()[0]
        return out
    try:
        out.update(bench_boundary(200_000 if quick else 2_000_000))
        out.update(bench_armed(root, 500 if quick else 5000, 3 if quick else 7))
        out.update(bench_supervisor(root, 10 if quick else 60))
        out.update(bench_containment(root, 5 if quick else 15))
        t1, r1 = _drill(1, root / "drill-1")
        assert r1.ok, r1.text()
        attempts = [len(c.attempts) for c in r1.cases]
        launches = 2 + sum(attempts)  # two discovery runs, then every attempt of every case
        tn = naive_drill([c.schedule for c in r1.cases], attempts, 2, root / "naive")
        out.update(
            drill_cases=len(r1.cases),
            drill_launches=launches,
            drill_1_worker_s=t1,
            naive_drill_s=tn,
            harness_overhead_ratio=t1 / tn,
        )
        t2, r2 = _drill(2, root / "drill-2")
        assert r2.ok, r2.text()
        out.update(drill_2_workers_s=t2, parallel_speedup=t1 / t2)
        out.update(bench_prefork(root))
        out.update(bench_runtimes(root / "runtimes"))  # time per case on each runtime beside LangGraph's
        out.update(bench_effects(quick))
        out.update(bench_real(1_000))
        out.update(bench_growth(quick))
        from tests.benchmarks.pytest_route import bench_pytest_route

        out.update(bench_pytest_route(root, 1 if quick else 3))
        from tests.benchmarks.deployment import bench_deployment

        out.update(bench_deployment(root, 1 if quick else 3))  # a served topology beside one command
        out["load_average_at_end"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


GOALS: dict[str, Goal] = {
    "boundary_unarmed_ns": Goal("<", 100),
    "boundary_armed_median_us": Goal("<", 100),
    "boundary_one_way_median_us": Goal("<", 10),
    "supervisor_overhead_ms": Goal("<", 10),
    "containment_cost_ratio": Goal("<=", 1.10),
    "harness_overhead_ratio": Goal("<=", 1.10),
    "parallel_speedup": Goal(">=", 1.7),
    "prefork_speedup": Goal(">=", 20),
    "prefork_fork_over_floor": Goal("<=", 1.25),
    **EFFECT_GOALS,
    **GROWTH_GOALS,
    # the pytest route at most 1.25x the CLI on the same cases (tests/benchmarks/pytest_route.py)
    "pytest_cli_ratio_serial": Goal("<=", 1.25),
    "pytest_cli_ratio_2_workers": Goal("<=", 1.25),
    "pytest_cli_ratio_spawn": Goal("<=", 1.25),
    "pytest_cli_ratio_2_workers_spawn": Goal("<=", 1.25),
    # the same without each front end's cost before any case (an empty pytest session, the CLI's help)
    "pytest_cli_ratio_serial_net": Goal("<=", 1.25),
    "pytest_cli_ratio_2_workers_net": Goal("<=", 1.25),
    "pytest_cli_ratio_spawn_net": Goal("<=", 1.25),
    # the drill phase (first collection to last test, from hooks) over the CLI less its help
    "pytest_cli_ratio_serial_drill": Goal("<=", 1.25),
    "pytest_cli_ratio_2_workers_drill": Goal("<=", 1.25),
    "pytest_cli_ratio_spawn_drill": Goal("<=", 1.25),
    "pytest_cli_ratio_2_workers_spawn_drill": Goal("<=", 1.25),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--json",
        default=os.path.join(tempfile.gettempdir(), "killdrill-benchmark.json"),
        help="where to write the figures (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("effects", "real", "growth", "pytest", "deploy"),
        default=(),
        help="just these rows",
    )
    args = parser.parse_args(argv)
    figures = run(args.quick, args.only)
    for name, value in figures.items():
        if isinstance(value, list):  # details (e.g. which cases differed): in the JSON
            print(f"{name}: {len(value)} (see {args.json})")
            continue
        print(line(name, value, GOALS))
    Path(args.json).write_text(json.dumps(figures, indent=2))
    print(f"written: {args.json}")
    return 0
