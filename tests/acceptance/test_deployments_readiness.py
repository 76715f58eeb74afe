"""A service's readiness is noticed when it happens: the port's first listen (the bootstrap's
listen mark), the log line as it is written, not on the deployment's fallback timer, which these
tests set far above the bound, so only a watched write could start the driver in time.  The
driver starts within ``BOUND_S`` of the service opening its port or writing its line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.drill.deployment import DeploymentCase
from killdrill.drill.workdirs import RunContext
from killdrill.points import Schedule

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")

LATE = Path(__file__).parent.parent / "agents" / "deploy" / "late.py"
FALLBACK_S = 20.0  # the timer alone would start the driver this late
BOUND_S = 2.0  # far below it, far above a loaded machine's event round trip (a few ms)


@pytest.mark.parametrize(
    ("serve", "ready", "launcher"),
    [
        (f"python {LATE} --port {{port}} --when {{workdir}}/when", {}, "spawn"),
        (f"python {LATE} --port {{port}} --when {{workdir}}/when", {}, "fork"),  # the template marks it
        (
            f"python {LATE} --line 'late service up' --when {{workdir}}/when",
            {"api": "log:late service up"},
            "spawn",
        ),
    ],
    ids=["tcp", "tcp-forked", "log"],
)
def test_the_driver_starts_as_the_service_becomes_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: str, ready: dict[str, str], launcher: str
) -> None:
    monkeypatch.setattr(DeploymentCase, "poll_s", FALLBACK_S)
    driver = tmp_path / "driver.py"
    driver.write_text("")
    options = DrillOptions(
        root=str(tmp_path / "w"), serve={"api": serve}, ready=ready, timeout=30, launcher=launcher
    )
    with Drill([sys.executable, str(driver)], options) as drill:
        run = RunContext(drill.setup.workdirs.new("ready"), "ready-1")
        try:
            deployed = drill.setup.deploy(run, Schedule(()), 1)
        finally:
            drill.setup.release(run)
    assert deployed.completed, deployed.attempts
    became_ready = float((run.workdir / "when").read_text())
    assert 0.0 <= deployed.started[1] - became_ready < BOUND_S
