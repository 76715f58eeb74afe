"""The suite's coverage in every process it starts: how a maintainer finds code nothing runs.

Not a test and not run by CI (pytest collects ``test_*.py`` only).  Most of the harness runs
outside the pytest process: the xdist workers, the harnesses the acceptance tests start, the
fork template and its keepers, the agents, the services, the wire fakes, chaos's pool workers.
So a plain ``pytest --cov`` misses it.  Here every Python process started from this venv
measures itself:

- coverage's own ``.pth`` file (``a1_coverage.pth``, installed with ``pip install coverage``)
  starts coverage in any interpreter that finds ``COVERAGE_PROCESS_START`` in its environment,
  and killdrill passes the harness's environment on to its children (``KILLDRILL_*`` aside);
  the agent's bootstrap (``integrations/_bootstrap/sitecustomize.py``) runs after ``.pth``
  files, so an agent is measured from its first line;
- ``patch = fork`` restarts measuring in a forked child (the template's keepers, a chaos pool
  worker) into a data file of its own, ``patch = _exit`` saves before ``os._exit`` (how forked
  children leave), ``sigterm = true`` saves in a process ended by SIGTERM;
- a SIGKILLed process writes nothing: an attempt killed at a point is lost, which is expected
  (what a killed attempt runs, a clean run of the same drill runs too).

Run it from the checkout, with the project's venv active and coverage installed
(``pip install coverage``), the services of ``.ci/run`` up and its variables set::

    python tests/coverage_all_processes.py                 # pytest -n 2, then the report
    python tests/coverage_all_processes.py -- -n 2 tests/unit   # other pytest arguments
    python tests/coverage_all_processes.py --report-only   # the report of the last run again

Data, the rc file and the reports go to ``$TMPDIR/killdrill-coverage/`` (``--dir`` to change).
It prints every function or method of ``killdrill/``, ``fakes/`` and ``pytest_plugin/`` that no
process ran (also written to ``never-run.txt``), and a summary.  A function listed is not dead
by itself: grep for its callers, the entry points in ``pyproject.toml``, the public names
(``killdrill/__init__.py``, ``docs/api.md``) and the protocols a framework calls.  Runs of parts
of the suite (each with its own ``--dir``) add up: a function is run if any ``coverage.json``
says so.  One long xdist worker once came back without the in-process lines of its later tests
(``tests/unit`` with ``-n 1``: nothing from ``tests/unit/process`` on); before calling a
function never run, run the tests that should reach it alone.  It is slow: on 2 shared, loaded
cores, 40% of the suite took 70 minutes with ``-n 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("killdrill", "fakes", "pytest_plugin")

RC = """\
[run]
parallel = true
data_file = {data}
source =
    {sources}
concurrency =
    thread
    multiprocessing
sigterm = true
patch =
    _exit
    fork
disable_warnings =
    no-data-collected
    module-not-measured
    module-not-imported
    couldnt-parse
    no-ctracer

[report]
exclude_also =
    if TYPE_CHECKING:
    @overload
"""


def run_suite(folder: Path, pytest_args: list[str]) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(".coverage*"):
        old.unlink()
    rc = folder / "coveragerc"
    rc.write_text(
        RC.format(
            data=folder / ".coverage",
            sources="\n    ".join(str(ROOT / s) for s in SOURCES),
        )
    )
    env = dict(os.environ, COVERAGE_PROCESS_START=str(rc))
    # The interpreter that runs pytest measures itself through the .pth file as its children do.
    code = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], cwd=ROOT, env=env)
    print(f"== pytest exited {code}")
    return code


def report(folder: Path) -> None:
    rc = folder / "coveragerc"
    cov = [sys.executable, "-m", "coverage"]
    if list(folder.glob(".coverage.*")):
        subprocess.check_call([*cov, "combine", "--rcfile", str(rc), "-q", "--keep"], cwd=ROOT)
    out = folder / "coverage.json"
    subprocess.check_call([*cov, "json", "--rcfile", str(rc), "-q", "-o", str(out)], cwd=ROOT)
    data = json.loads(out.read_text())
    never: list[str] = []
    functions = 0
    for path, info in sorted(data["files"].items()):
        rel = os.path.relpath(path, ROOT)
        for name, fn in info.get("functions", {}).items():
            if not name:  # the module's own lines
                continue
            functions += 1
            if not fn["executed_lines"] and fn["missing_lines"]:
                never.append(f"{rel}:{fn['start_line']}: {name}")
    (folder / "never-run.txt").write_text("".join(f"{n}\n" for n in never))
    print("\n".join(never))
    totals = data["totals"]
    print(
        f"== {len(never)} of {functions} functions never run in any process; "
        f"lines {totals['covered_lines']}/{totals['num_statements']} "
        f"({totals['percent_covered_display']}%); list in {folder / 'never-run.txt'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "killdrill-coverage")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("pytest_args", nargs="*", default=["-n", "2"])
    args = parser.parse_args()
    code = 0
    if not args.report_only:
        code = run_suite(args.dir, args.pytest_args)
    report(args.dir)
    return code


if __name__ == "__main__":
    sys.exit(main())
