"""Nightly: a machine's and a network's faults drawn by chaos (``--faults power``, ``--faults deps``)
over agents written as users write them (``tests/agents``), and each find reproduced from its line.

- power: a JSON checkpoint replaced without fsync and SQLite in WAL mode under
  ``synchronous=NORMAL`` survive every kill; chaos turns one run's kill in two into a power loss,
  finds them, shrinks the find to ``powerloss:POINT`` (cause ``unsynced_write``), and the shrunk
  schedule run again shows the same violation every time.  Their correct forms (fsync,
  ``synchronous=FULL``) stay exactly-once.  Skipped with the reason where FUSE is missing.
- deps: a deployment (an order service and its client that retries) stays exactly-once while
  chaos restarts the service at the client's points; a psycopg agent that retries a step blindly
  through ``--proxy`` is caught when chaos cuts its connections at ``COMMIT`` (with PostgreSQL:
  ``KILLDRILL_TEST_POSTGRES_URL``), and the one that checks first is not.

Runs follow the profile: ``KILLDRILL_CHAOS_RUNS`` (200 nightly, 30 in ci) for the correct agents,
30 runs at most to find each bug.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from killdrill.chaos import VIOLATED, ChaosOptions, ChaosResult, run_chaos
from killdrill.drill import Drill, DrillOptions
from killdrill.faults.lossy_mount import unavailable

AGENTS = Path(__file__).resolve().parents[1] / "tests" / "agents"
POWER = AGENTS / "power"
JSON = [sys.executable, str(POWER / "json_checkpoint.py"), "--ckpt", "{workdir}/checkpoint.json"]
SQLITE = [sys.executable, str(POWER / "sqlite_checkpoint.py"), "--db", "{workdir}/state.db"]
NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"
RUNS = int(os.environ.get("KILLDRILL_CHAOS_RUNS", "200" if NIGHTLY else "30"))
WORKERS = int(os.environ.get("KILLDRILL_CHAOS_WORKERS", str(os.cpu_count() or 1)))
SEED = int(os.environ.get("KILLDRILL_CHAOS_SEED", "20240601"))
POSTGRES = os.environ.get("KILLDRILL_TEST_POSTGRES_URL")

fuse = pytest.mark.skipif(unavailable() is not None, reason=f"power loss: {unavailable()}")


def _chaos(
    command: list[str], options: DrillOptions, faults: tuple[str, ...], runs: int, report: Path, hunt: bool
) -> ChaosResult:
    """``runs`` chaos runs drawing ``faults`` besides kills (``hunt``: stop at the first find)."""
    opts = ChaosOptions(
        seed=SEED,
        runs=runs,
        processes=WORKERS,
        faults=("kill", *faults),
        max_failures=1 if hunt else None,
        shrink_runs=12,
        report_dir=str(report),
    )
    return run_chaos(command, options, opts)


@fuse
@pytest.mark.parametrize(
    ("command", "lost"),
    [([*JSON, "--bug", "no-fsync"], "checkpoint.json"), ([*SQLITE, "--bug", "normal"], "state.db-wal")],
    ids=["json-no-fsync", "sqlite-normal"],
)
def test_chaos_with_power_losses_finds_an_unsynced_checkpoint_and_its_line_reproduces_it(
    tmp_path: Path, command: list[str], lost: str
) -> None:
    options = DrillOptions(root=tmp_path / "w", timeout=60)
    result = _chaos(command, options, ("power",), 30, tmp_path / "r", True)
    assert [r for r in result.runs if r.outcome == VIOLATED], "no power loss caught it in 30 runs"
    shrunk = result.failures[0]
    assert shrunk.schedule.startswith("powerloss:") and "%" not in shrunk.schedule, shrunk.schedule
    assert shrunk.reproduce.startswith("killdrill run --schedule ") and shrunk.schedule in shrunk.reproduce
    with Drill(command, DrillOptions(root=tmp_path / "again", timeout=60)) as drill:
        for _ in range(3):  # what the reproduction line runs
            case = drill.run_case(shrunk.schedule)
            assert tuple(sorted(case.kinds)) == shrunk.kinds, case.text()
            assert case.violations[0].cause == "unsynced_write", case.text()
            assert lost in case.violations[0].observed, case.violations[0].observed


@fuse
@pytest.mark.parametrize("command", [JSON, SQLITE], ids=["json-fsync", "sqlite-full"])
def test_a_durable_checkpoint_stays_exactly_once_under_chaos_with_power_losses(
    tmp_path: Path, command: list[str]
) -> None:
    options = DrillOptions(root=tmp_path / "w", timeout=60)
    result = _chaos(command, options, ("power",), RUNS, tmp_path / "r", False)
    bad = [c.text() for c in result.cases if not c.ok]
    assert not bad, "\n\n".join(bad)
    assert sum("powerloss:" in r.schedule for r in result.runs) >= RUNS // 4  # the power losses were drawn


DEPLOY = AGENTS / "deploy"
SHOP = ["python", str(DEPLOY / "shop.py"), "--port", "{port}", "--state", "{workdir}/orders"]
URL = "http://127.0.0.1:{port}/orders"
CLIENT = ["python", str(DEPLOY / "client.py"), "--url", URL, "--order", "{thread}"]


def test_a_deployment_stays_exactly_once_while_chaos_restarts_its_service(tmp_path: Path) -> None:
    options = DrillOptions(root=tmp_path / "w", serve={"api": SHOP}, timeout=60)
    result = _chaos(CLIENT, options, ("deps",), RUNS, tmp_path / "r", False)
    bad = [c.text() for c in result.cases if not c.ok]
    assert not bad, "\n\n".join(bad)
    assert sum("restart=api:" in r.schedule for r in result.runs) >= RUNS // 4  # the restarts were drawn


def _payout(retry: str, root: Path) -> tuple[list[str], DrillOptions]:
    options = DrillOptions(
        root=root,
        timeout=60,
        proxy={"pg": "postgres://127.0.0.1:5432"},
        effect_table={"payouts": (("order_id",), None)},
        effect_db=POSTGRES,
        env={"DATABASE_URL": "postgresql://postgres@127.0.0.1:{proxy:pg}/test"},
    )
    return ["python", str(AGENTS / "db" / "pg_retry.py"), "--order", "{thread}", "--retry", retry], options


@pytest.mark.skipif(POSTGRES is None, reason="no PostgreSQL: set KILLDRILL_TEST_POSTGRES_URL")
def test_chaos_cutting_a_commit_catches_a_blind_retry_and_not_one_that_checks(tmp_path: Path) -> None:
    command, options = _payout("blind", tmp_path / "blind")
    caught = _chaos(command, options, ("deps",), 12, tmp_path / "r-blind", False)
    cut = [r for r in caught.runs if r.schedule.startswith(("cut=pg:", "rst=pg:"))]
    assert cut and all(r.outcome == VIOLATED for r in cut), [(r.schedule, r.outcome) for r in caught.runs]
    assert caught.failures and caught.failures[0].kinds == ("duplicate_effect",)
    command, options = _payout("check", tmp_path / "check")
    result = _chaos(command, options, ("deps",), RUNS, tmp_path / "r-check", False)
    bad = [c.text() for c in result.cases if not c.ok]
    assert not bad, "\n\n".join(bad)
    assert any(r.schedule.startswith(("cut=pg:", "rst=pg:")) for r in result.runs)
