"""``python -m tests.audit``: the audit of "nothing leaves the machine, nothing is left behind".

    python -m tests.audit [--rounds N] [--only NAME ...] [--parts kills,together,hostile,strace]

Parts: ``kills`` (the harness SIGKILLed mid-drill N times per topology: survivors, leftovers after
the next run), ``together`` (4 drills at once to their end: false alarms, tracebacks, leftovers),
``hostile`` (mistaken command lines, hostile requests to the fakes), ``strace`` (each topology's
whole drill in a hostile environment: connects off the loopback).  Needs Redis, RabbitMQ and
PostgreSQL on 127.0.0.1 for their topologies (one that is down is skipped and said) and
``strace``.  Prints the figures and writes them as JSON (``--out``); exit 1 when any is not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.audit import concurrent, hostile, inspect, kills, network
from tests.audit.topologies import Topology, topologies

PORTS = {"redis": 6379, "rabbitmq": 5672, "postgres": 5432}
TOGETHER = ("plain agent", "deployment with a service", "Celery on Redis", "MCP proxy")


def _available(chosen: list[Topology]) -> list[Topology]:
    out = []
    for t in chosen:
        down = [n for n in t.needs if not inspect.up(PORTS[n])]
        if down:
            print(f"skipped {t.name}: {', '.join(down)} is not up on 127.0.0.1", flush=True)
        else:
            kills.write_files(t)
            out.append(t)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="harness kills per topology (3)")
    parser.add_argument("--only", nargs="*", default=None, help="topologies by name (default: all)")
    parser.add_argument("--parts", default="kills,together,hostile,strace")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "killdrill-audit.json"))
    parser.add_argument("--jobs", type=int, default=1, help="straced drills at once (1)")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    base = Path(tempfile.mkdtemp(prefix="killdrill-audit-"))
    every = topologies(base)
    chosen = [t for t in every if args.only is None or t.name in args.only]
    chosen = _available(chosen)
    rng = random.Random(args.seed)
    figures: dict[str, Any] = {"load": os.getloadavg(), "cpus": os.cpu_count(), "started": time.ctime()}
    bad = 0
    if "kills" in parts:
        figures["kills"] = []
        for t in chosen:
            for _ in range(args.rounds):
                k = kills.kill_once(t, base, rng)
                figures["kills"].append(asdict(k))
                flag = bool(k.survivors or k.left_after or k.tracebacks or k.clean_exit)
                bad += flag
                print(
                    f"kill  {t.name:28} at {k.killed_after_s:6.2f}s  all gone in {k.gone_after_s:5.2f}s  "
                    f"survivors {len(k.survivors)}  "
                    f"left before clean {sum(map(len, k.left_before.values())):3}  "
                    f"after {k.left_after or 0}  "
                    f"{k.note}",
                    flush=True,
                )
    if "together" in parts:
        together = [t for t in chosen if t.name in TOGETHER]
        results = concurrent.run_together(together, base)
        figures["together"] = [asdict(r) for r in results]
        for r in results:
            bad += bool(r.exit or r.tracebacks or r.survivors or r.left)
            print(
                f"together {r.topology:25} exit {r.exit}  {r.seconds:6.1f}s  tracebacks {r.tracebacks}  "
                f"survivors {len(r.survivors)}  left {r.left or 0}",
                flush=True,
            )
            if r.tail:
                print(r.tail, flush=True)
    if "hostile" in parts:
        answered = [hostile.command_line(what, a, base) for what, a in hostile.COMMAND_LINES]
        answered += hostile.fake_requests(base)
        figures["hostile"] = [asdict(a) for a in answered]
        for a in answered:
            bad += not a.ok
            print(
                f"hostile {'ok ' if a.ok else 'BAD'} {a.what:42} {a.seconds:5.1f}s  {a.said[:150]}",
                flush=True,
            )
    if "strace" in parts:
        if shutil.which("strace") is None:
            print("strace is not installed: apt-get install -y strace", flush=True)
            return 2
        figures["strace"] = []
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            traced = list(pool.map(lambda t: network.traced(t, base), chosen))
        for t, r in zip(chosen, traced, strict=True):
            figures["strace"].append(asdict(r))
            bad += bool(r.off_machine or r.dns or r.exit or r.tracebacks or r.left)
            print(
                f"strace {t.name:28} exit {r.exit}  connects {r.connects:5}  "
                f"off the machine {r.off_machine or 0}  "
                f"dns {r.dns}  tracebacks {r.tracebacks}  left {r.left or 0}",
                flush=True,
            )
            if r.tail:
                print(r.tail, flush=True)
    figures["load_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    print(f"{bad} findings; figures in {args.out}; folders kept for findings under {base}", flush=True)
    if not any(base.glob("audit-*")):
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
