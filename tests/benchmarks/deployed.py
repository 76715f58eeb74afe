"""Deployed runtimes per case beside their floors, side by side in one run.

    python -m tests.benchmarks.deployed [--points N] [--rounds N] [--workers] [--only NAME ...]
        [--launcher spawn fork] [--json FILE]

Each topology is a bundled example as a user deploys it: the DBOS web app and its client
(``outbox``), the Temporal worker and its starter (``transfer``), two Celery worker replicas and
their submitter (``checkout``), and the Temporal agent whose activities have a 3 s start-to-close
(``receipt``: worker and starter in one command, tests/detection/agents/temporal_receipt.py).
Each is drilled with its processes spawned and forked from a warm template that imported the
example (``--launcher fork``).  Discovery (one clean run) is timed apart.  Then the topology's
kill mid-effect and ``--points`` points spread over the catalogue are each drilled ``--rounds``
times, each case beside its floor, interleaved (drill then floor, floor then drill): the floor
is two plain runs of the same topology, started the same way (the runtime's server or broker and
the case's namespace set up beforehand, off the clock, as a user's environment is), no kill and
no harness: each run starts the services, waits until they are ready (the probe the drill uses,
knocked every 10 ms), runs the driver to its end and stops the services (SIGTERM, waited for):
fresh interpreters, as a user starts them.  Printed per row: seconds per case, per floor, their
ratio against its goal, and the runtime waits the drill said.  ``--workers``: the same cases,
each twice (an even number, so that neither worker idles through an odd last case), with one
worker and with ``--workers 2``, alternated over ``--workers-rounds`` rounds: the wall-clock
speedup over one worker, the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EX = "killdrill.examples"
RECEIPT = REPO / "tests" / "detection" / "agents" / "temporal_receipt.py"


@dataclass(frozen=True)
class Top:
    name: str
    module: str  # what must import for the row to run
    driver: tuple[str, ...]
    serve: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    goal: float = 1.5  # a case at most this many times its floor
    points: tuple[str, ...] = ()  # always drilled (a kill mid-effect), before the spread ones
    preload: tuple[str, ...] = ()  # what the fork template imports (``--launcher fork``)


TOPOLOGIES = (
    Top(
        "outbox_dbos",
        "dbos",
        ("python", "-m", f"{EX}.outbox_client", "--url", "http://127.0.0.1:{port}", "--order", "{thread}"),
        {"app": f"python -m {EX}.outbox_dbos --port {{port}} --workdir {{workdir}}"},
        {"integrations": ("dbos",)},
        points=("app:during:mailbox.send",),
        preload=(f"{EX}.outbox_dbos", f"{EX}.outbox_client", "uvicorn"),
    ),
    Top(
        "transfer_temporal",
        "temporalio",
        (
            "python",
            "-m",
            f"{EX}.transfer_temporal",
            "starter",
            "--thread",
            "{thread}",
            "--task-queue",
            "{thread}",
        ),
        {"worker": f"python -m {EX}.transfer_temporal worker --task-queue {{thread}}"},
        {"integrations": ("temporal",), "ready": {"worker": "log:worker polling"}},
        points=("worker:during:payments.charge",),
        preload=(f"{EX}.transfer_temporal",),
    ),
    Top(
        "checkout_celery",
        "celery",
        ("python", "-m", f"{EX}.checkout_celery", "submit", "--thread", "{thread}", "--workdir", "{workdir}"),
        {"worker": f"python -m {EX}.checkout_celery worker --name w{{replica}} --workdir {{workdir}}"},
        {"integrations": ("celery",), "replicas": {"worker": 2}},
        points=("worker:during:payments.charge",),
        preload=(f"{EX}.checkout_celery",),
    ),
    Top(
        "receipt_temporal",
        "temporalio",
        ("python", str(RECEIPT), "--thread", "{thread}", "--workdir", "{workdir}"),
        options={"integrations": ("temporal",)},
        goal=2.0,
        points=("during:payments.charge",),
        preload=("temporalio.client", "temporalio.worker"),
    ),
)


def spread(catalogue: Sequence[str], n: int) -> list[str]:
    """``n`` points evenly spread over the catalogue (first and last included)."""
    if n >= len(catalogue):
        return list(catalogue)
    if n == 1:
        return [catalogue[len(catalogue) // 2]]
    return [catalogue[round(i * (len(catalogue) - 1) / (n - 1))] for i in range(n)]


def plain_run(drill: Any, command: Sequence[str], root: Path) -> float:
    """One run of the drill's topology as plain processes, no harness; its seconds (the runtime's
    namespace or broker prefix for it set up before the clock starts, released after)."""
    from killdrill.drill.topology import DRIVER
    from killdrill.drill.workdirs import RunContext
    from killdrill.isolation import isolated
    from killdrill.process.readiness import ready

    workdir = root / f"plain-{uuid.uuid4().hex[:10]}"
    (workdir / ".killdrill").mkdir(parents=True)
    thread = f"kd-{uuid.uuid4().hex[:12]}"
    run = RunContext(workdir, thread)
    env = isolated({k: v for k, v in os.environ.items() if not k.startswith("KILLDRILL_")})  # as a drill's
    env["KILLDRILL_LEDGER"] = str(workdir / ".killdrill" / "ledger.sqlite")
    env.update(drill.setup._service_env(run))  # the runtime's server / broker, as the drill's
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    topology = drill.setup.topology
    processes = (
        topology.processes(thread, str(workdir))
        if topology is not None
        else [_Driver(DRIVER, tuple(_fill(command, thread, workdir)), {}, None)]
    )
    services: list[tuple[Any, subprocess.Popen[bytes], str]] = []
    t0 = time.perf_counter()
    try:
        for p in processes:
            if p.name == DRIVER:
                continue
            log = str(workdir / f"{p.name}.log")
            proc = subprocess.Popen(
                _argv(p.argv), env={**env, **p.env}, cwd=str(REPO), stdout=open(log, "wb"),  # noqa: SIM115
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            services.append((p, proc, log))
        for p, proc, log in services:
            while p.ready is not None and not ready(p.ready, log, log):
                assert proc.poll() is None, (
                    f"{p.name} ended before it was ready: {Path(log).read_text()[-2000:]}"
                )
                time.sleep(0.01)
        driver = next(p for p in processes if p.name == DRIVER)
        out = subprocess.run(
            _argv(driver.argv), env={**env, **driver.env}, cwd=str(REPO), capture_output=True, timeout=300
        )
        # Temporal's SDK may crash at interpreter exit once the driver printed its result
        # (sdk-python#300, the integration's exit_abort): the run did its work
        crashes = (-signal.SIGABRT, 128 + signal.SIGABRT, -signal.SIGSEGV, 128 + signal.SIGSEGV)
        aborted = out.returncode in crashes and bool(out.stdout.strip())
        logs = "".join(Path(log).read_text(errors="replace")[-1500:] for _, _, log in services)
        assert out.returncode == 0 or aborted, (out.returncode, out.stdout[-1000:], out.stderr[-2000:], logs)
    finally:
        for _, proc, _ in services:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, _ in services:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    seconds = time.perf_counter() - t0
    drill.setup.release(run)
    return seconds


@dataclass(frozen=True)
class _Driver:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    ready: str | None


def _fill(argv: Sequence[str], thread: str, workdir: Path) -> list[str]:
    return [a.replace("{thread}", thread).replace("{workdir}", str(workdir)) for a in argv]


def _argv(argv: Sequence[str]) -> list[str]:
    return [sys.executable, *argv[1:]] if argv[0] == "python" else list(argv)


def bench_one(
    top: Top,
    root: Path,
    n_points: int,
    rounds: int,
    workers: bool,
    launcher: str = "spawn",
    workers_rounds: int = 3,
) -> dict[str, Any]:
    import importlib.util

    from killdrill.drill import Drill
    from killdrill.options import DrillOptions

    if importlib.util.find_spec(top.module) is None:
        return {"skipped": f"{top.module} is not importable here"}
    serve = dict(top.serve)
    fork: dict[str, Any] = {"launcher": "fork", "preload": top.preload} if launcher == "fork" else {}
    options = DrillOptions(
        root=str(root / f"{top.name}-{launcher}"), cwd=str(REPO), timeout=180, discovery_runs=1,
        serve=serve, **top.options, **fork,
    )  # fmt: skip
    row: dict[str, Any] = {"goal": top.goal, "launcher": launcher}
    with Drill(list(top.driver), options) as drill:
        t0 = time.perf_counter()
        catalogue = drill.points()
        row["discovery_s"] = time.perf_counter() - t0
        points = list(dict.fromkeys([*top.points, *spread(catalogue, n_points)]))
        row["points"] = points
        cases: list[tuple[float, float, Any]] = []
        for r in range(rounds):
            for p in points:
                pair: dict[str, Any] = {}
                for which in ("drill", "floor") if (r + len(cases)) % 2 == 0 else ("floor", "drill"):
                    t = time.perf_counter()
                    if which == "drill":
                        pair["case"] = drill.run_case(p)
                        pair["drill"] = time.perf_counter() - t
                    else:
                        pair["floor"] = sum(plain_run(drill, top.driver, root) for _ in range(2))
                cases.append((pair["drill"], pair["floor"], pair["case"]))
                c = pair["case"]
                if not c.ok:
                    print(f"VIOLATED:\n{c.text()}", file=sys.stderr, flush=True)
                print(
                    f"  {top.name} {p}: case {pair['drill']:.2f}s floor {pair['floor']:.2f}s"
                    f" ({pair['drill'] / pair['floor']:.2f}x) {'ok' if c.ok else 'VIOLATED'}"
                    f" waits {sum(w['seconds'] for w in c.waits):.2f}s",
                    file=sys.stderr,
                    flush=True,
                )
    row["case_s"] = statistics.mean(c[0] for c in cases)
    row["floor_s"] = statistics.mean(c[1] for c in cases)
    row["ratio"] = statistics.median(c[0] / c[1] for c in cases)
    row["waits_s"] = statistics.mean(sum(w["seconds"] for w in c[2].waits) for c in cases)
    row["verdicts_ok"] = all(c[2].ok for c in cases)
    row["cases"] = len(cases)
    if workers:
        row.update(bench_workers(top, root, options, points * rounds, workers_rounds))
    return row


def bench_workers(
    top: Top, root: Path, options: Any, schedules: list[str], rounds: int = 3
) -> dict[str, Any]:
    """The same cases with one worker and with two, wall clock (discovery done before, untimed).

    Each schedule is drilled twice: an even number of cases, so that two workers can finish
    together (with 3 cases the second worker idles through the third: at most 1.5x).  One worker
    and two alternate ``rounds`` times (1, 2, 2, 1, 1, 2...) on drills kept open across rounds, and
    the speedup is the median of the rounds' ratios: a forked topology's cases last half a second,
    and one slow case (a scheduling hiccup on a busy machine) moves a single pair by 0.2x."""
    from dataclasses import replace

    from killdrill.drill import Drill

    schedules = [*schedules, *schedules]
    out: dict[str, Any] = {"workers_cases": len(schedules), "workers_rounds": rounds}
    times: dict[int, list[float]] = {1: [], 2: []}
    ok = {1: True, 2: True}
    with contextlib.ExitStack() as stack:
        drills = {}
        for n in (1, 2):
            opts = replace(options, workers=n, root=f"{options.root}-w{n}")
            drills[n] = stack.enter_context(Drill(list(top.driver), opts))
            drills[n].discover()
        for r in range(rounds):
            for n in (1, 2) if r % 2 == 0 else (2, 1):
                t = time.perf_counter()
                result = drills[n].run_all(schedules)
                times[n].append(time.perf_counter() - t)
                ok[n] = ok[n] and all(c.ok for c in result.cases)
                for c in result.cases:
                    if not c.ok:  # a correct example violated: its whole text, to read
                        print(f"VIOLATED with --workers {n}:\n{c.text()}", file=sys.stderr, flush=True)
            print(
                f"  {top.name} workers round {r + 1}: 1 worker {times[1][-1]:.2f}s,"
                f" 2 workers {times[2][-1]:.2f}s ({times[1][-1] / times[2][-1]:.2f}x)",
                file=sys.stderr,
                flush=True,
            )
    for n in (1, 2):
        out[f"workers_{n}_s"] = statistics.median(times[n])
        out[f"workers_{n}_ok"] = ok[n]
    out["workers_ratios"] = [a / b for a, b in zip(times[1], times[2], strict=True)]
    out["workers_speedup"] = statistics.median(out["workers_ratios"])
    return out


def render(rows: dict[str, dict[str, Any]]) -> str:
    lines = [
        "topology, launcher       discovery  s/case  floor s (2 plain runs)  x floor  goal"
        "     waits/case  verdicts"
    ]
    for name, row in rows.items():
        if "skipped" in row:
            lines.append(f"{name:<24} n/a: {row['skipped']}")
            continue
        met = "met" if row["ratio"] <= row["goal"] else "MISSED"
        lines.append(
            f"{name:<24} {row['discovery_s']:>8.1f}s {row['case_s']:>6.2f}s {row['floor_s']:>22.2f}s"
            f" {row['ratio']:>7.2f}  <= {row['goal']:g} {met:<6} {row['waits_s']:>6.2f}s"
            f"  {'exactly-once' if row['verdicts_ok'] else 'VIOLATED'} ({row['cases']} cases)"
        )
        if "workers_speedup" in row:
            lines.append(
                f"{'':<24} --workers 2: {row['workers_2_s']:.1f}s vs 1 worker {row['workers_1_s']:.1f}s"
                f" ({row['workers_cases']} cases, median of {row['workers_rounds']} rounds),"
                f" speedup {row['workers_speedup']:.2f}"
                f" [{' '.join(f'{x:.2f}' for x in row['workers_ratios'])}] (goal >= 1.7"
                f" {'met' if row['workers_speedup'] >= 1.7 else 'MISSED'})"
                f"{'' if row['workers_1_ok'] and row['workers_2_ok'] else '  VIOLATED'}"
            )
    return "\n".join(lines)


@contextlib.contextmanager
def celery_keys_removed() -> Any:
    """The Redis keys the floors' plain Celery runs made (a drill's are under its own prefix and
    swept by the harness; a plain run's are Celery's own: its results, kombu's bindings), removed
    at the end: what was there before is left alone."""
    try:
        import redis

        from killdrill.examples.checkout_celery import LOCAL_REDIS  # the floors' broker and backend

        client = redis.Redis.from_url(LOCAL_REDIS)
        before = set(client.scan_iter())
    except Exception:  # no redis-py or no Redis: the Celery rows say they are skipped
        yield
        return
    try:
        yield
    finally:
        made = [k for k in client.scan_iter() if k not in before]
        plain = [k for k in made if k.startswith((b"celery-task-meta-", b"_kombu."))]
        if plain:
            client.delete(*plain)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.deployed", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--points", type=int, default=2, help="points spread over each catalogue, beside its kill"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", action="store_true", help="also --workers 2 against 1")
    parser.add_argument("--workers-rounds", type=int, default=3, help="1-vs-2-worker rounds, alternated")
    parser.add_argument("--only", nargs="*", default=())
    parser.add_argument(
        "--launcher", nargs="*", default=["spawn", "fork"], help="drill each topology spawned and/or forked"
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    load0 = os.getloadavg()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="killdrill-bench-deployed-") as tmp, celery_keys_removed():
        for top in TOPOLOGIES:
            for launcher in args.launcher:
                if not args.only or top.name in args.only:
                    row = bench_one(
                        top, Path(tmp), args.points, args.rounds, args.workers, launcher, args.workers_rounds
                    )
                    rows[f"{top.name} {launcher}"] = row
    print(render(rows))
    load1 = os.getloadavg()
    print(f"load average at start {load0[0]:.2f}, at end {load1[0]:.2f}, {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "load": [load0[0], load1[0]]}, indent=2))
    return 0 if all(r.get("verdicts_ok", True) for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
