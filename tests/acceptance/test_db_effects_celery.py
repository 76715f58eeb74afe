"""A Celery task's receipt rows in the app's own database, drilled as deployed through the CLI:
two worker replicas (``--serve``, ``--replicas``) on the local Redis, the submitter as the driver,
``--effect-table 'receipts(order_id)'`` read from SQLite (a file in each run's workdir) or
PostgreSQL (a schema per run).  The task charges under a key made from the order, then writes
its receipt: with ``ON CONFLICT DO NOTHING`` on a unique ``order_id`` it is exactly-once at every
point; with a plain ``INSERT`` a task redelivered after its worker was killed before the ack
writes a second receipt (its charge replays), which only the rows show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.test_celery import REDIS, broker
from tests.acceptance.test_celery_deployed import left_in_broker
from tests.acceptance.test_db_effects import SQLITE, left_by_the_dead, left_schemas
from tests.cli_support import run_cli
from tests.frameworks import need
from tests.leftovers import survivors

need("celery", "celery", "redis")

AGENT = Path(__file__).parent.parent / "agents" / "db" / "receipts_celery.py"
WORKER = f"worker=python {AGENT} worker --name w{{replica}}"
SUBMIT = ["python", str(AGENT), "submit", "--thread", "{thread}", "--workdir", "{workdir}"]
POINTS = (
    "worker:before:charge_order",
    "worker:during:payments.charge",
    "worker:after:charge_order",
    "worker:committed:charge_order",
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def effect_db(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return SQLITE
    url: str = request.getfixturevalue("postgres_server_url")
    return url


def drill(tmp_path: Path, url: str, *args: str, bug: bool = False) -> str:
    """``killdrill ARGS`` on the deployed receipts task; asserts nothing is left running, in the
    broker or in PostgreSQL; returns rc and output."""
    root = tmp_path / "w"
    before = left_schemas(url)
    out = run_cli(
        tmp_path, *args, "--integration", "celery", "--broker", broker(REDIS), "--discovery-runs", "1",
        "--keep", "--root", str(root), "--serve", WORKER, "--replicas", "worker=2",
        "--effect-table", "receipts(order_id)", "--effect-db", url,
        "--env", "DATABASE_URL={KILLDRILL_EFFECT_DB}",
        "--", *SUBMIT, *(["--bug", "plain"] if bug else []),
        timeout=400,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert not survivors(str(root), seconds=0.3), f"a process of the case survived it:\n{text}"
    assert left_in_broker(REDIS, root) == [], f"the case left its queues or results behind:\n{text}"
    assert left_by_the_dead(url, before) == [], f"the drill left its schemas behind:\n{text}"
    return f"rc={out.returncode}\n{text}"


def test_a_redelivered_plain_insert_is_a_duplicate_receipt(tmp_path: Path, effect_db: str) -> None:
    text = drill(tmp_path, effect_db, "run", "--schedule", "worker:after:charge_order", bug=True)
    assert text.startswith("rc=1\n"), text
    assert "duplicate_effect: db:receipts.insert {order_id: {thread}} landed 2 times" in text, text
    assert "cause: row_not_unique" in text, text
    assert "Effects: db:receipts 1 duplicated; payments 1 exactly-once" in text, text


@pytest.mark.slow  # ~40 s a backend; the buggy task above is the per-push evidence
def test_the_receipt_with_on_conflict_is_exactly_once_at_every_point(tmp_path: Path, effect_db: str) -> None:
    text = drill(tmp_path, effect_db, "drill")
    assert text.startswith("rc=0\n"), text
    for point in POINTS:
        assert f"{point}" in text, text
    assert "db:receipts 4 exactly-once; payments 4 exactly-once" in text, text
