"""The pytest route against the CLI on the same cases, measured side by side.

    python -m tests.benchmarks.pytest_route [--rounds N] [--quick]

Each pair runs back to back, CLI then pytest then the other order next round, and the figure is
the median of the pairs' ratios: on shared cores the load moves a whole 20 s drill by 2x between
two minutes, so only runs next to each other compare.  Both sides start cold and do the same
work: the CLI discovers and runs every case; pytest (its own fresh cache directory) discovers at
collection and runs one test per case.  Both run with bytecode caches on (written by an untimed
warm-up), whatever ``PYTHONDONTWRITEBYTECODE`` says here.  Rows:

- ``pytest_cli_ratio_serial``: the LangGraph settlement example, fork launcher, one process;
- ``pytest_cli_ratio_2_workers``: the same, ``pytest --killdrill-workers=2`` (one pytest process,
  two cases at once) against ``killdrill drill --workers 2``;
- ``pytest_cli_ratio_2_workers_xdist``: the same cases, ``pytest -n 2`` (two xdist workers)
  against ``--workers 2``: what xdist's start and end cost on a drill this short;
- ``pytest_cli_ratio_spawn``: the plain settlement example, spawn launcher, serial;
- ``pytest_cli_ratio_2_workers_spawn`` and ``..._spawn_xdist``: the same two ways against
  ``--workers 2``, on a drill about twice as long as the LangGraph one's.

Beside each pair, in the same order, pytest runs a file of one empty test with the same flags,
and the CLI prints its help: what each front end costs before any case (``pytest_empty_*_s``,
``cli_empty_*_s``).  ``pytest_cli_ratio_*_net`` is the ratio of the two without them: the
drills' own time in each route.  Under ``-n 2`` the empty session is pytest-xdist starting a
controller and two workers, each importing pytest and every installed plugin (LangGraph's
``langsmith`` plugin alone is 0.2 s), about 2 s on the 2-core machine of docs/figures.md against
0.9 s serial: on the 34 cases of the LangGraph example (4-5 s in the CLI) that constant is what
keeps the ``_xdist`` rows' raw ratio above 1.25, and why the plugin runs a drill test's cases at once
in one process (``--killdrill-workers``).  ``pytest_cli_ratio_*_without_langsmith`` (LangGraph rows, when
``langsmith`` is installed): the same pytest run with ``-p no:langsmith_plugin``, in the same
pair, so the plugin's share of the gap shows next to it (its import is ~0.5 s per pytest
process: the controller's, then every worker's).

Where the pytest run's time goes, from hooks in every pytest process (a small plugin of this
benchmark's, ``-p``): ``pytest_{row}_start_s`` from the command to the first collection's start
(pytest, xdist's controller and workers, every plugin imported), ``pytest_{row}_drill_s`` from
there to the last test's end (collection with its discovery, every case), ``pytest_{row}_end_s``
the rest (session teardown, the processes' exit).  ``pytest_cli_ratio_{row}_drill`` is the drill
phase over the CLI's run less its empty run: the part of each route that killdrill's work makes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PY = sys.executable
LANGGRAPH = ["python", "-m", "killdrill.examples.settlement_langgraph", "--thread", "{thread}", "--db"]
LANGGRAPH += ["{workdir}/ckpt.sqlite"]
PLAIN = [
    "python",
    "-m",
    "killdrill.examples.settlement",
    "--thread",
    "{thread}",
    "--db",
    "{workdir}/ckpt.sqlite",
]

_EMPTY = """
def test_nothing():
    pass
"""

# Loaded with ``-p`` into every pytest process of a timed run: when its collection started and
# its last test ended (wall clock), one file per process, read by ``_phases``.
_PHASES_PLUGIN = """
import json, os, time

_seen = {"collect": None, "last": None}


def pytest_collection(session):
    _seen["collect"] = _seen["collect"] or time.time()


def pytest_runtest_logfinish(nodeid, location):
    _seen["last"] = time.time()


def pytest_unconfigure(config):
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["BENCH_PHASES_DIR"], name + ".json"), "w") as f:
        json.dump({"worker": name != "main", **_seen}, f)
"""
_PHASES = "bench_route_phases"

_TEST = """
import pytest

AGENT = {agent!r}


@pytest.mark.killdrill(discover=AGENT, **{marker!r})
def test_every_boundary(killdrill, kill_point):
    killdrill.run(AGENT, kill_point).assert_exactly_once()
"""


def _timed(argv: Sequence[str], cwd: Path, extra_env: dict[str, str] | None = None) -> tuple[float, str]:
    """Run ``argv`` in ``cwd`` (with ``extra_env``); its wall time and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KILLDRILL_", "PYTEST_"))}
    env.update(extra_env or {})
    # Bytecode caches on, as on a developer's machine or CI: without them pytest assertion-rewrites
    # every module of every pytest11 plugin's distribution (langsmith, hypothesis, killdrill) again
    # in each session, seconds that say nothing about killdrill.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(
            f"{argv[:4]}... exited {proc.returncode}:\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}"
        )
    return took, proc.stdout


def _pair(
    root: Path,
    name: str,
    agent: list[str],
    marker: dict[str, Any],
    cli_flags: list[str],
    workers: int,
    i: int,
    xdist: bool = False,
) -> dict[str, float]:
    """One CLI drill and one pytest run of the same cases, in the order ``i`` says."""
    where = root / f"{name}-{i}"
    where.mkdir(parents=True)
    (where / "test_route.py").write_text(_TEST.format(agent=agent, marker=marker))
    (where / "pytest.ini").write_text("[pytest]\n")
    (where / "empty").mkdir()
    (where / "empty" / "test_empty.py").write_text(_EMPTY)
    (where / "empty" / "pytest.ini").write_text("[pytest]\n")
    cli = [PY, "-m", "killdrill", "drill", *cli_flags, "--root", str(where / "cli")]
    cli += (["--workers", str(workers)] if workers > 1 else []) + ["--", *agent]

    def pytest_in(folder: Path) -> list[str]:
        argv = [PY, "-m", "pytest", "-q", "-p", "no:randomly", "-o", f"cache_dir={folder / 'cache'}"]
        argv += ["--basetemp", str(folder / "tmp")]
        if workers > 1:  # xdist's workers, or the plugin's cases at once in one process
            argv += ["-n", str(workers)] if xdist else [f"--killdrill-workers={workers}"]
        return argv

    tests = pytest_in(where)
    empty = {"cli": [PY, "-m", "killdrill", "--help"], "pytest": pytest_in(where / "empty")}
    plugin, phases = where / "plugin", where / "phases"
    plugin.mkdir()
    phases.mkdir()
    (plugin / f"{_PHASES}.py").write_text(_PHASES_PLUGIN)
    path = os.pathsep.join(filter(None, [str(plugin), os.environ.get("PYTHONPATH")]))
    with_phases = {"BENCH_PHASES_DIR": str(phases), "PYTHONPATH": path}
    out: dict[str, float] = {}
    for side in ("cli", "pytest") if i % 2 == 0 else ("pytest", "cli"):
        began = time.time()
        if side == "cli":
            took, text = _timed(cli, where)
        else:
            took, text = _timed([*tests, "-p", _PHASES], where, with_phases)
            out.update(_phases(phases, began, began + took))
        out[side] = took
        out[f"{side}_empty"] = _timed(empty[side], where / "empty" if side == "pytest" else where)[0]
        if side == "pytest":
            found = re.search(r"(\d+) passed", text)
            out["tests"] = float(found.group(1)) if found else 0.0
            if "langgraph" in marker.get("integrations", ()) and _has_langsmith_plugin():
                shutil.rmtree(where / "cache", ignore_errors=True)  # cold, as the run before
                shutil.rmtree(where / "tmp", ignore_errors=True)
                out["pytest_without_langsmith"] = _timed([*tests, "-p", "no:langsmith_plugin"], where)[0]
    shutil.rmtree(where, ignore_errors=True)
    return out


def _phases(folder: Path, began: float, ended: float) -> dict[str, float]:
    """The pytest run's start, drill and end phases from the phases plugin's files: the drill
    runs from the first collection's start (a worker's, under xdist) to the last test's end."""
    seen = [json.loads(f.read_text()) for f in folder.glob("*.json")]
    workers = [s for s in seen if s["worker"]] or seen
    first = min(s["collect"] for s in workers if s["collect"] is not None)
    last = max(s["last"] for s in workers if s["last"] is not None)
    return {"pytest_start": first - began, "pytest_drill": last - first, "pytest_end": ended - last}


def _has_langsmith_plugin() -> bool:
    """Is LangSmith's pytest plugin installed here (it comes with ``langchain-core``)?"""
    return importlib.util.find_spec("langsmith") is not None and any(
        ep.name == "langsmith_plugin" for ep in importlib.metadata.entry_points(group="pytest11")
    )


def _row(root: Path, key: str, rounds: int, *args: Any, xdist: bool = False) -> dict[str, Any]:
    pairs = [_pair(root, key, *args, i, xdist=xdist) for i in range(rounds)]
    ratios = [p["pytest"] / p["cli"] for p in pairs]
    net = [(p["pytest"] - p["pytest_empty"]) / (p["cli"] - p["cli_empty"]) for p in pairs]
    lean: dict[str, Any] = {}
    if all("pytest_without_langsmith" in p for p in pairs):
        lean[f"pytest_cli_ratio_{key}_without_langsmith"] = statistics.median(
            p["pytest_without_langsmith"] / p["cli"] for p in pairs
        )
    return {
        **lean,
        f"pytest_cli_ratio_{key}": statistics.median(ratios),
        f"pytest_cli_ratio_{key}_net": statistics.median(net),
        f"pytest_cli_ratio_{key}_drill": statistics.median(
            p["pytest_drill"] / (p["cli"] - p["cli_empty"]) for p in pairs
        ),
        f"pytest_{key}_start_s": statistics.median(p["pytest_start"] for p in pairs),
        f"pytest_{key}_drill_s": statistics.median(p["pytest_drill"] for p in pairs),
        f"pytest_{key}_end_s": statistics.median(p["pytest_end"] for p in pairs),
        f"pytest_empty_{key}_s": statistics.median(p["pytest_empty"] for p in pairs),
        f"cli_empty_{key}_s": statistics.median(p["cli_empty"] for p in pairs),
        f"pytest_{key}_s": statistics.median(p["pytest"] for p in pairs),
        f"cli_{key}_s": statistics.median(p["cli"] for p in pairs),
        f"pytest_{key}_tests": pairs[0]["tests"],
        f"pytest_cli_ratios_{key}": [round(r, 3) for r in ratios],  # every pair, for the JSON
    }


def bench_pytest_route(root: Path, rounds: int) -> dict[str, Any]:
    """The rows of the module docstring; without langgraph the LangGraph rows say so."""
    warm = root / "warm-up"
    warm.mkdir(parents=True)
    (warm / "test_route.py").write_text(_TEST.format(agent=PLAIN, marker={}))
    _timed([PY, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"], warm)  # bytecode caches
    out: dict[str, Any] = {"load_average_before_pytest_route": os.getloadavg()[0]}
    if importlib.util.find_spec("langgraph") is None:
        out["pytest_cli_ratio_serial"] = "n/a: no langgraph"
        out["pytest_cli_ratio_2_workers"] = "n/a: no langgraph"
    else:
        lg = {"integrations": ["langgraph"], "launcher": "fork"}
        flags = ["--integration", "langgraph", "--launcher", "fork"]
        out.update(_row(root, "serial", rounds, LANGGRAPH, lg, flags, 1))
        out.update(_row(root, "2_workers", rounds, LANGGRAPH, lg, flags, 2))
        if importlib.util.find_spec("xdist") is None:
            out["pytest_cli_ratio_2_workers_xdist"] = "n/a: no pytest-xdist"
        else:
            out.update(_row(root, "2_workers_xdist", rounds, LANGGRAPH, lg, flags, 2, xdist=True))
    out.update(_row(root, "spawn", rounds, PLAIN, {}, [], 1))
    out.update(_row(root, "2_workers_spawn", rounds, PLAIN, {}, [], 2))
    if importlib.util.find_spec("xdist") is not None:
        # the same pytest-xdist start and end against a drill twice as long as the LangGraph
        # one's under two workers: how the raw ratio falls as the drill grows, measured
        out.update(_row(root, "2_workers_spawn_xdist", rounds, PLAIN, {}, [], 2, xdist=True))
    out["load_average_after_pytest_route"] = os.getloadavg()[0]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from tests.benchmarks.bench import GOALS
    from tests.benchmarks.goals import line

    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.pytest_route")
    parser.add_argument("--rounds", type=int, default=3, help="pairs per row (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="one pair per row")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="killdrill-bench-pytest-"))
    try:
        figures = bench_pytest_route(root, 1 if args.quick else args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, value in figures.items():
        print(line(name, value, GOALS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
