"""The suite keeps its temporary folders under pytest's basetemp, and a stopped run ends quietly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import killdrill

AGENTS = Path(__file__).parents[1] / "agents" / "basic"


def test_a_kept_workdir_of_a_planted_bug_lands_under_pytests_basetemp(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A drill without ``root`` keeps a failing case's workdir: inside basetemp, never in /tmp."""
    base = tmp_path_factory.getbasetemp().resolve()
    assert Path(tempfile.gettempdir()).resolve().is_relative_to(base)
    assert Path(os.environ["TMPDIR"]).resolve().is_relative_to(base)  # the subprocesses' too
    agent = ["python", str(AGENTS / "steps.py"), "--thread", "{thread}", "--ckpt", "{workdir}/c.json"]
    result = killdrill.run([*agent, "--bug", "nokey"], "during:payments.charge", discovery_runs=1)
    assert not result.ok and Path(result.workdir).resolve().is_relative_to(base)


STOPPABLE = """
import time


def test_one():
    pass


def test_two():
    open("started", "w").close()
    time.sleep(600)
"""


@pytest.mark.slow  # a `pytest -n 2` session starts and stops: about a minute on a loaded 2-core machine
def test_pytest_n2_stopped_by_sigterm_ends_quietly_with_a_summary(pytester: pytest.Pytester) -> None:
    """SIGTERM to the whole process group of ``pytest -n 2``: a summary line, no traces."""
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_stop=STOPPABLE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q"],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not any(pytester.path.glob("started")):
        time.sleep(0.2)
        if proc.poll() is not None:
            break
    time.sleep(1)  # test_one has reported
    os.killpg(proc.pid, signal.SIGTERM)
    stopped = time.monotonic()
    out, _ = proc.communicate(timeout=180)
    assert time.monotonic() - stopped < 120, out  # not after the 600 s test
    assert "Warning" not in out and "Traceback" not in out and "OSError" not in out, out
    assert re.fullmatch(r"(\d+ passed|no tests ran).* in [\d.]+s.*", out.rstrip().splitlines()[-1]), out
