"""The hostile-agent measurement behind the "Reliability" figures (docs/figures.md).

    python -m tests.benchmarks.containment [--rounds N]

Each round, for each launcher (spawn, fork): one full drill of tests/agents/basic/escapees.py
(every attempt leaves four kinds of escapee behind), then one ``drill --workers 2`` killed
mid-attempt by each of SIGINT, SIGTERM and SIGKILL.  After each, leftovers are counted by
marker over a second of /proc scans.  Prints the totals and the slowest stop / clean-up.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests import leftovers

AGENT = Path(__file__).resolve().parents[1] / "agents" / "basic" / "escapees.py"
PY = sys.executable


def _pids(late: Path) -> int:
    return len({line.split()[1] for line in late.read_text().splitlines() if line.strip()})


def full_drill(tmp: Path, launcher: str) -> tuple[int, int, int, bool]:
    """(cases, escapee pids seen, leftovers, late effects) of one drill run to its end."""
    marker = f"kd{uuid.uuid4().hex[:8]}"
    late = tmp / f"{marker}.late"
    argv = [PY, "-m", "killdrill", "drill", "--launcher", launcher, "--root", str(tmp / marker)]
    done = subprocess.run(
        [*argv, "--", PY, str(AGENT), "all", marker, str(late)], capture_output=True, text=True
    )
    cases = done.stderr.count("exactly-once") + done.stderr.count("VIOLATED")
    size = late.stat().st_size
    left = leftovers.survivors(marker)
    if left or late.stat().st_size != size:
        print(f"LEFT after a full {launcher} drill: {leftovers.describe(left)}", flush=True)
    leftovers.kill(marker)
    return cases, _pids(late), len(left), late.stat().st_size != size


def killed_harness(tmp: Path, launcher: str, sig: signal.Signals) -> tuple[int, float, float, int, bool]:
    """(exit code, seconds to exit, seconds until nothing is left, leftovers, late effects)."""
    marker = f"kd{uuid.uuid4().hex[:8]}"
    late, root = tmp / f"{marker}.late", tmp / marker
    argv = [PY, "-m", "killdrill", "drill", "--workers", "2", "--launcher", launcher, "--root", str(root)]
    harness = subprocess.Popen(
        [*argv, "--", PY, str(AGENT), "all", marker, str(late)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not root.exists() or not any(root.glob("*-before_work")):
        time.sleep(0.02)
    Path(f"{late}.hold").touch()
    while len(leftovers.scan(marker)) < 8:
        time.sleep(0.02)
    templates = leftovers.templates(harness.pid)
    t = time.monotonic()
    harness.send_signal(sig)
    harness.wait()
    stop = time.monotonic() - t
    clean = stop + leftovers.wait_gone(templates)  # the templates exit once all is clean
    size = late.stat().st_size
    left = leftovers.survivors(marker)
    if left or late.stat().st_size != size:
        print(f"LEFT after {launcher} {sig.name}: {leftovers.describe(left)}", flush=True)
    leftovers.kill(marker)
    return harness.returncode, stop, clean, len(left), late.stat().st_size != size


def main() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # an inherited "ignore" would pass on
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.containment")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="killdrill-contain-"))
    totals = {"cases": 0, "escapees": 0, "leftovers": 0, "late": 0, "kills": 0}
    worst: dict[str, float] = {}
    codes: dict[str, set[int]] = {}
    for _ in range(args.rounds):
        for launcher in ("spawn", "fork"):
            cases, pids, left, late = full_drill(tmp, launcher)
            totals["cases"] += cases
            totals["escapees"] += pids
            totals["leftovers"] += left
            totals["late"] += late
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
                rc, stop, clean, left, late = killed_harness(tmp, launcher, sig)
                key = f"{launcher} {sig.name}"
                codes.setdefault(key, set()).add(rc)
                worst[f"{key} exit_s"] = max(worst.get(f"{key} exit_s", 0), stop)
                worst[f"{key} clean_s"] = max(worst.get(f"{key} clean_s", 0), clean)
                totals["kills"] += 1
                totals["leftovers"] += left
                totals["late"] += late
    print(
        f"full drills: {totals['cases']} cases, {totals['escapees']} escapee pids started; "
        f"harness kills: {totals['kills']}; leftovers: {totals['leftovers']}; "
        f"runs with effects after the end: {totals['late']}"
    )
    for key, rcs in codes.items():
        print(
            f"  {key}: exit {sorted(rcs)}, exited within {worst[key + ' exit_s']:.2f}s, "
            f"nothing left within {worst[key + ' clean_s']:.2f}s"
        )
    return 1 if totals["leftovers"] or totals["late"] else 0


if __name__ == "__main__":
    sys.exit(main())
