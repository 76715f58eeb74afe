"""PostgreSQL as a dependency the drill serves and restarts: ``--serve pg=...`` runs a server of
its own for each run (``tests/agents/db/pg_serve.py``: ``initdb`` on first start, then the server
as the ``postgres`` user, its cluster kept across a SIGKILL), and ``restart=pg:driver:after:charge``
kills it as the order agent's charge landed, before the row that records it committed.  The agent
retries on a connection error and looks for the row first: the row was lost with the server, so
it charges again, under the order's key (replayed: exactly-once) or, with ``--bug nokey``, without
one (two charges: caught), as the ledger read here says.

Needs root (the server runs as the ``postgres`` user) and ``initdb`` on PATH; skipped otherwise."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.cli_support import run_cli
from tests.leftovers import survivors

pytest.importorskip("psycopg")
if shutil.which("initdb") is None or shutil.which("postgres") is None:
    pytest.skip(
        "needs PostgreSQL's initdb and postgres on PATH (Debian: postgresql)", allow_module_level=True
    )
if os.geteuid() != 0:
    pytest.skip("runs the server as the postgres user: needs root", allow_module_level=True)

AGENTS = Path(__file__).parent.parent / "agents" / "db"
FAULT = "restart=pg:driver:after:charge"


@pytest.mark.parametrize("bug", [pytest.param("", marks=pytest.mark.slow), "nokey"])  # the catch per push
def test_a_served_postgres_restarted_as_the_charge_landed(tmp_path: Path, bug: str) -> None:
    data = f"/tmp/kd-pg-{tmp_path.name}"  # reachable by the postgres user, removed by the server's end
    root = tmp_path / "w"
    try:
        out = run_cli(
            tmp_path,
            "run", "--discovery-runs", "1", "--root", str(root), "--keep", "--timeout", "60",
            "--schedule", FAULT,
            "--serve", f"pg=python {AGENTS / 'pg_serve.py'} --port {{port}} --data {data}-{{thread}}",
            "--env", "DATABASE_URL=postgresql://postgres@127.0.0.1:{port:pg}/postgres",
            "--", "python", str(AGENTS / "pg_orders.py"), "--order", "{thread}",
            *(["--bug", bug] if bug else []),
        )  # fmt: skip
        text = out.stdout + out.stderr
        assert not survivors(str(root), seconds=0.3), "a process of the case survived it"
        assert not list(Path("/tmp").glob(f"kd-pg-{tmp_path.name}-*")), ("a run's cluster was left", text)
    finally:
        for left in Path("/tmp").glob(f"kd-pg-{tmp_path.name}-*"):
            shutil.rmtree(left, ignore_errors=True)
    assert f"(pg) fault {FAULT}: killed by SIGKILL" in text, text
    assert "service pg (attempt 2) killed when after:charge was reached; ready again (attempt 3)" in text, (
        text
    )
    assert "(pg) ran free: drained (rc 0)" in text, text  # the restarted server shut down cleanly
    (case,) = [d for d in root.iterdir() if d.name.startswith("002-restart")]
    with sqlite3.connect(case / ".killdrill" / "ledger.sqlite") as db:
        outcomes = [
            o for (o,) in db.execute("select outcome from killdrill_calls where provider = 'payments'")
        ]
    if bug:
        assert outcomes == ["created", "created"], outcomes  # charged twice: the row went with the server
        assert out.returncode == 1, text
        assert "duplicate_effect: payments.charge" in text, text
        assert "attempt 1's call landed, then its dependency pg was restarted under it" in text, text
    else:
        assert outcomes == ["created", "replayed"], outcomes
        assert out.returncode == 0, text
        assert "payments 1 exactly-once" in text, text
