"""The cost of a deployment's topology per case, beside a one-command agent of the same work.

    python -m tests.benchmarks.deployment [--rounds N] [--json FILE]   (also ``--only deploy``)

The work: one order charged once (tests/agents/deploy).  The topology: ``shop.py`` served with
``--serve`` (an HTTP service, ready when its ``{port}`` accepts) and ``client.py`` as the driver;
the one command: ``inline.py``, the same boundaries and the same charge.  Each round drills both,
back to back and in alternating order (shared cores: only runs next to each other compare), and
times one case of each kind:

- ``deploy_clean_case_s`` / ``inline_clean_case_s``: a case with no kill (service start,
  readiness, driver, teardown for the topology);
- ``deploy_kill_case_s`` / ``inline_kill_case_s``: killed at the charge (``api:during:...``, the
  service restarted and the client retrying; the one command re-run);
- ``deploy_ready_ms``: from the service's start to its port accepting, read from the case;
- ``deploy_*_ratio``: the median over rounds of the paired ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from killdrill.drill import Drill
from killdrill.options import DrillOptions

DEPLOY = Path(__file__).resolve().parents[1] / "agents" / "deploy"
SHOP = f"api=python {DEPLOY / 'shop.py'} --port {{port}} --state {{workdir}}/orders"
CLIENT = [
    "python",
    str(DEPLOY / "client.py"),
    "--url",
    "http://127.0.0.1:{port}/orders",
    "--order",
    "{thread}",
]
INLINE = ["python", str(DEPLOY / "inline.py"), "--order", "{thread}", "--state", "{workdir}/orders"]


def _cases(command: list[str], options: DrillOptions, kill: str) -> tuple[float, float, float | None]:
    """Seconds of a case without a kill and of one killed at ``kill`` (discovery done first, untimed)."""
    with Drill(command, options) as drill:
        drill.discover()
        t = time.perf_counter()
        clean = drill.run_case("none", check=False)
        t_clean = time.perf_counter() - t
        t = time.perf_counter()
        killed = drill.run_case(kill)
        t_kill = time.perf_counter() - t
    assert clean.ok and killed.ok, (clean.violations, killed.violations)
    ready = next((n for a in clean.attempts for n in a.notes if n.startswith("started once")), None)
    return t_clean, t_kill, float(ready.split(", ")[1].split(" ms")[0]) if ready else None


def bench_deployment(root: Path, rounds: int = 3) -> dict[str, Any]:
    deploy_opts = DrillOptions(
        root=str(root / "deploy"), discovery_runs=1, serve={"api": SHOP.split("=", 1)[1]}
    )
    inline_opts = DrillOptions(root=str(root / "inline"), discovery_runs=1)
    rows: dict[str, list[float]] = {k: [] for k in ("dc", "dk", "ic", "ik", "ready")}
    for i in range(rounds):
        pair = [
            ("d", CLIENT, deploy_opts, "api:during:payments.charge"),
            ("i", INLINE, inline_opts, "during:payments.charge"),
        ]
        for side, command, options, kill in pair if i % 2 == 0 else pair[::-1]:
            clean, killed, ready = _cases(command, options, kill)
            rows[side + "c"].append(clean)
            rows[side + "k"].append(killed)
            if ready is not None:
                rows["ready"].append(ready)
    med = statistics.median
    return {
        "deploy_clean_case_s": med(rows["dc"]),
        "inline_clean_case_s": med(rows["ic"]),
        "deploy_clean_case_ratio": med(d / i for d, i in zip(rows["dc"], rows["ic"], strict=True)),
        "deploy_kill_case_s": med(rows["dk"]),
        "inline_kill_case_s": med(rows["ik"]),
        "deploy_kill_case_ratio": med(d / i for d, i in zip(rows["dk"], rows["ik"], strict=True)),
        "deploy_ready_ms": med(rows["ready"]) if rows["ready"] else float("nan"),
        "deploy_rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.deployment", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    measured(lambda tmp: bench_deployment(tmp, args.rounds), "deploy", args.json)


def measured(
    bench: Callable[[Path], dict[str, Any]], name: str, json_path: str | None, digits: int = 3
) -> None:
    """Run ``bench`` in a temporary folder between two load-average readings; print its figures
    (and write them to ``json_path``)."""
    figures: dict[str, Any] = {"load_average_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix=f"killdrill-bench-{name}-") as tmp:
        figures.update(bench(Path(tmp)))
    figures["load_average_at_end"] = os.getloadavg()[0]
    for key, value in figures.items():
        print(f"{key}: {value:.{digits}f}" if isinstance(value, float) else f"{key}: {value}")
    if json_path:
        Path(json_path).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
