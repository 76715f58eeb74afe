"""What a dependency's faults cost per case, beside a plain kill at the same point, in one run.

    python -m tests.benchmarks.dependency_faults [--rounds N] [--json FILE]

Two agents, each drilled once for its discovery (untimed), then per round one case of each
schedule, in an order that rotates every round (shared cores: only cases next to each other
compare):

- the psycopg payout agent (``tests/agents/db/pg_retry.py --retry check``) through ``--proxy
  pg``: ``none`` (a clean case through the proxy), ``during:pg.commit`` (the plain kill: killed
  once the server committed, resumed), ``drop:pg.commit``, ``reset:pg.commit``, ``cut=pg:during:pg.commit``;
- the order service and its client (``tests/agents/deploy``): ``api:during:payments.charge``
  (the plain kill of the service, restarted) and ``restart=api:driver:before:submit`` (the
  service killed and restarted when the client reaches a point);
- the JSON and SQLite checkpoint agents (``tests/agents/power``, their durable forms):
  ``after:pay_alice`` (the plain kill) and ``powerloss:after:pay_alice`` (the kill, then the
  workdir's unsynced writes dropped: the workdir on the lossy FUSE file system for the whole
  case), where FUSE is available (left out with the reason otherwise).

Beside them, the proxy's own cost: 200 one-row transactions with psycopg straight to PostgreSQL
and through a proxy that announces nothing (``pg_commit_direct_ms`` / ``pg_commit_proxied_ms``,
per transaction, alternating, median of the rounds).

Every case must pass (the correct agents): a figure of a failing case would time its failure.
Prints the median seconds per case and each fault's ratio to its plain kill (median of the
per-round ratios), with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from killdrill.drill import Drill
from killdrill.faults.lossy_mount import unavailable
from killdrill.options import DrillOptions

AGENTS = Path(__file__).resolve().parents[1] / "agents"
PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PAYOUT = ["python", str(AGENTS / "db" / "pg_retry.py"), "--order", "{thread}", "--retry", "check"]
SHOP = ["python", str(AGENTS / "deploy" / "shop.py"), "--port", "{port}", "--state", "{workdir}/orders"]
CLIENT = [
    "python",
    str(AGENTS / "deploy" / "client.py"),
    "--url",
    "http://127.0.0.1:{port}/orders",
    "--order",
    "{thread}",
]


def _pg(root: Path) -> Drill:
    options = DrillOptions(
        root=root,
        proxy={"pg": "postgres://127.0.0.1:5432"},
        effect_table={"payouts": (("order_id",), None)},
        effect_db=PG,
        env={"DATABASE_URL": "postgresql://postgres@127.0.0.1:{proxy:pg}/test"},
    )
    return Drill(PAYOUT, options)


def _deploy(root: Path) -> Drill:
    return Drill(CLIENT, DrillOptions(root=root, serve={"api": SHOP}, discovery_runs=1))


def _power(root: Path, agent: str, *args: str) -> Drill:
    return Drill([sys.executable, str(AGENTS / "power" / agent), *args], DrillOptions(root=root))


def _commits(direct_first: bool, n: int = 200) -> tuple[float, float]:
    """Milliseconds per one-row transaction, straight to PostgreSQL and through a proxy."""
    import psycopg

    from killdrill.faults.proxy import FaultProxy

    def loop(port: int) -> float:
        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="test") as conn:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS t (x int)")
            conn.commit()
            t = time.perf_counter()
            for i in range(n):
                conn.execute("INSERT INTO t VALUES (%s)", (i,))
                conn.commit()
            return (time.perf_counter() - t) * 1000.0 / n

    with FaultProxy("pg", "postgres", ("127.0.0.1", 5432)) as proxy:
        port = proxy.listen("bench")
        if direct_first:
            direct = loop(5432)
            return direct, loop(port)
        proxied = loop(port)
        return loop(5432), proxied


def _time(drill: Drill, schedule: str) -> float:
    t = time.perf_counter()
    case = drill.run_case(schedule, check=schedule != "none")
    took = time.perf_counter() - t
    assert case.ok, case.text()
    return took


def run(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kd-bench-dep-") as tmp:
        drills = {"proxied": _pg(Path(tmp) / "p"), "deploy": _deploy(Path(tmp) / "s")}
        cases = [
            ("pg_clean", "proxied", "none"),
            ("pg_kill", "proxied", "during:pg.commit"),
            ("pg_drop", "proxied", "drop:pg.commit"),
            ("pg_reset", "proxied", "reset:pg.commit"),
            ("pg_cut", "proxied", "cut=pg:during:pg.commit"),
            ("pg_rst", "proxied", "rst=pg:during:pg.commit"),
            ("deploy_kill", "deploy", "api:during:payments.charge"),
            ("deploy_restart", "deploy", "restart=api:driver:before:submit"),
        ]
        fuse = unavailable()
        if fuse is None:
            drills["json"] = _power(Path(tmp) / "j", "json_checkpoint.py", "--ckpt", "{workdir}/c.json")
            drills["sqlite"] = _power(Path(tmp) / "q", "sqlite_checkpoint.py", "--db", "{workdir}/s.db")
            for agent in ("json", "sqlite"):
                cases += [
                    (f"{agent}_kill", agent, "after:pay_alice"),
                    (f"{agent}_power", agent, "powerloss:after:pay_alice"),
                ]
        times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        try:
            for d in drills.values():
                d.discover()
            for r in range(rounds):
                for name, which, schedule in cases[r % len(cases) :] + cases[: r % len(cases)]:
                    times[name].append(_time(drills[which], schedule))
                direct, proxied = _commits(r % 2 == 0)
                times.setdefault("pg_commit_direct", []).append(direct)
                times.setdefault("pg_commit_proxied", []).append(proxied)
        finally:
            for d in drills.values():
                d.close()

    def ratio(a: str, b: str) -> float:
        return round(statistics.median(x / y for x, y in zip(times[a], times[b], strict=True)), 3)

    out: dict[str, Any] = {
        f"{k}_ms" if k.startswith("pg_commit") else f"{k}_s": round(statistics.median(v), 3)
        for k, v in times.items()
    }
    if fuse is None:
        out.update(
            json_power_to_kill_ratio=ratio("json_power", "json_kill"),
            sqlite_power_to_kill_ratio=ratio("sqlite_power", "sqlite_kill"),
        )
    out.update(
        pg_proxy_commit_ratio=ratio("pg_commit_proxied", "pg_commit_direct"),
        pg_drop_to_kill_ratio=ratio("pg_drop", "pg_kill"),
        pg_reset_to_kill_ratio=ratio("pg_reset", "pg_kill"),
        pg_cut_to_kill_ratio=ratio("pg_cut", "pg_kill"),
        pg_rst_to_kill_ratio=ratio("pg_rst", "pg_kill"),
        deploy_restart_to_kill_ratio=ratio("deploy_restart", "deploy_kill"),
        rounds=rounds,
        power_loss=fuse or "measured",
        load=[round(x, 2) for x in os.getloadavg()],
        cpus=os.cpu_count(),
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    figures = run(args.rounds)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
