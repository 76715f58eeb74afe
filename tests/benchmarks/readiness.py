"""How soon a deployment notices a service ready: watched writes beside the timer alone, in one run.

    python -m tests.benchmarks.readiness [--rounds N] [--cases K] [--json FILE]

A service that starts late (``tests/agents/deploy/late.py``: 0.3 s, then it listens on its
``{port}`` saying nothing, or writes a ``log:`` line) and a driver that does nothing.  Each round
runs K cases of each probe kind twice, back to back in alternating order (shared cores: only runs
next to each other compare): once as the drill runs (the probe tried at each write to the
service's logs or listen mark, through inotify, and on the 50 ms fallback timer), once with no
file watch (the timer alone: what a machine without inotify does, as every deployment did before
the watch).  Per case, read on the machine's one monotonic clock:

- ``noticed``: from the service starting to listen (or writing its line) to the harness deciding
  to start the driver;
- ``started``: to the driver's launch (its spawn included).

Prints the median and the 90th percentile of each, with the machine's load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from killdrill.drill import Drill, DrillOptions
from killdrill.drill.deployment import DeploymentCase
from killdrill.drill.workdirs import RunContext
from killdrill.points import Schedule
from killdrill.process.filewatch import FileWatch
from tests.benchmarks.deployment import measured

LATE = Path(__file__).resolve().parents[1] / "agents" / "deploy" / "late.py"
PROBES = {
    "tcp": (f"python {LATE} --port {{port}} --when {{workdir}}/when", {}),
    "log": (f"python {LATE} --when {{workdir}}/when", {"api": "log:late service up"}),
}


@contextmanager
def _timer_alone() -> Iterator[None]:
    """No file watch: the deployment notices on its fallback timer alone."""
    real = FileWatch.open
    FileWatch.open = classmethod(lambda cls: None)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        FileWatch.open = real  # type: ignore[method-assign]


def _cases(root: Path, probe: str, k: int) -> list[tuple[float, float]]:
    """``k`` cases: ms from the service ready to the driver's start decided, and launched."""
    decided: list[float] = []
    start = DeploymentCase._start

    def timed(case: DeploymentCase, spec: Any) -> None:
        if spec is case.driver and case.driver_runs == 0:
            decided.append(time.monotonic())
        start(case, spec)

    serve, ready = PROBES[probe]
    options = DrillOptions(root=str(root), serve={"api": serve}, ready=ready, timeout=30)
    out = []
    DeploymentCase._start = timed  # type: ignore[method-assign]
    try:
        with Drill([sys.executable, "-c", "pass"], options) as drill:
            for i in range(k):
                run = RunContext(drill.setup.workdirs.new(f"{probe}-{i}"), f"ready-{i}")
                try:
                    deployed = drill.setup.deploy(run, Schedule(()), 1)
                finally:
                    drill.setup.release(run)
                when = float((run.workdir / "when").read_text())
                out.append(((decided[-1] - when) * 1000.0, (deployed.started[1] - when) * 1000.0))
    finally:
        DeploymentCase._start = start  # type: ignore[method-assign]
    return out


def bench_readiness(root: Path, rounds: int = 5, k: int = 4) -> dict[str, Any]:
    rows: dict[str, list[tuple[float, float]]] = {}
    for i in range(rounds):
        for probe in PROBES:
            sides = [("watched", False), ("timer", True)]
            for side, alone in sides if i % 2 == 0 else sides[::-1]:
                with _timer_alone() if alone else nullcontext():
                    rows.setdefault(f"{probe}_{side}", []).extend(
                        _cases(root / f"{probe}-{side}-{i}", probe, k)
                    )
    figures: dict[str, Any] = {}
    for name, pairs in rows.items():
        for j, what in enumerate(("noticed", "started")):
            values = sorted(p[j] for p in pairs)
            figures[f"{name}_{what}_ms"] = statistics.median(values)
            figures[f"{name}_{what}_p90_ms"] = values[int(0.9 * (len(values) - 1))]
    figures["cases_each"] = rounds * k
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.readiness", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    measured(lambda tmp: bench_readiness(tmp, args.rounds, args.cases), "ready", args.json, digits=1)


if __name__ == "__main__":
    main()
