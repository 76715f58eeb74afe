"""``committed:TASK`` on a Celery worker as users deploy one: ``celery -A orders worker -c 2``
(``acks_late``, ``task_reject_on_worker_lost``, ``worker_prefetch_multiplier=1``; a keyed Stripe
charge over the HTTP fakes, a receipt row in PostgreSQL) beside a submitter that sends three
orders and waits for them, on the local Redis and RabbitMQ.

The point means the broker has the ack, and the worker is never held where production passes in
microseconds: on Redis, with a ``BRPOP`` reply pending (the next order popped into it, in no Redis
key).  So the same correct code gives the same verdict at ``worker:committed:charge_order#2``
every run.  The one real window (the message popped, not yet in ``unacked``) is a point of its
own under ``--pop-window``, and a kill there is named ``redis_pop_window`` with its fix.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_celery import AMQP, REDIS, broker
from tests.acceptance.test_celery_deployed import left_in_broker
from tests.cli_support import run_cli
from tests.frameworks import need
from tests.leftovers import survivors

need("celery", "celery", "redis")
need("stripe", "stripe")
need("postgres", "psycopg")

APP = Path(__file__).parents[1] / "agents" / "celery_orders"
WORKER = (
    f"worker=celery --workdir {APP} -A orders worker -c 2 --loglevel WARNING -n w@%h "
    "--without-gossip --without-mingle --without-heartbeat"
)
SUBMIT = ["python", str(APP / "submit.py"), "{thread}", "{workdir}"]
REPEATS = int(os.environ.get("KILLDRILL_CELERY_ACK_REPEATS", "20"))


@pytest.fixture
def receipts() -> Iterator[tuple[str, str]]:
    """The orders' database and a receipts table of the test's own (dropped after it)."""
    url = os.environ.get("KILLDRILL_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("KILLDRILL_TEST_POSTGRES_URL is not set (a PostgreSQL for the orders' receipts)")
    import psycopg

    url = url.replace("postgresql+psycopg://", "postgresql://")
    table = f"kd_receipts_{uuid.uuid4().hex[:12]}"
    yield url, table
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {table}")


def drill(tmp_path: Path, url: str, receipts: tuple[str, str], *args: str, refused: bool = False) -> str:
    """``killdrill ARGS`` on the deployed order worker; asserts nothing is left running or in the
    broker (``refused``: nothing made at all, not even a case's folder); returns rc and output."""
    root = tmp_path / "w"
    db, table = receipts
    out = run_cli(
        tmp_path, *args, "--integration", "celery", "--broker", broker(url), "--http-fakes",
        "--discovery-runs", "1", "--keep", "--root", str(root), "--serve", WORKER,
        "--env", "STRIPE_API_BASE={KILLDRILL_FAKES_URL}", "--env", f"ORDERS_DATABASE_URL={db}",
        "--env", f"ORDERS_TABLE={table}", "--", *SUBMIT,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert not survivors(str(root), seconds=0.3), f"a process of the case survived it:\n{text}"
    if refused:
        assert not root.exists() or not any(root.iterdir()), f"a refused drill left {list(root.iterdir())}"
    else:
        assert left_in_broker(url, root) == [], f"the case left its queues or results behind:\n{text}"
    return f"rc={out.returncode}\n{text}"


def exactly_once_at_the_second_commit(tmp_path: Path, url: str, receipts: tuple[str, str]) -> None:
    text = drill(tmp_path, url, receipts, "run", "--schedule", "worker:committed:charge_order#2")
    assert text.startswith("rc=0\n") and "EXACTLY-ONCE" in text, text
    assert "Effects: payments 3 exactly-once" in text, text
    assert "killed by SIGKILL at committed:charge_order#2" in text, text


@pytest.mark.parametrize(  # RabbitMQ under -m slow: the race was Redis's
    "url", [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq", marks=pytest.mark.slow)]
)
def test_a_kill_at_the_second_commit_loses_no_order(
    tmp_path: Path, url: str, receipts: tuple[str, str]
) -> None:
    exactly_once_at_the_second_commit(tmp_path, url, receipts)


@pytest.mark.slow  # ~18 s a run: KILLDRILL_CELERY_ACK_REPEATS runs (20 by default)
@pytest.mark.parametrize("url", [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq")])
def test_the_same_verdict_at_the_second_commit_every_run(
    tmp_path: Path, url: str, receipts: tuple[str, str]
) -> None:
    for n in range(REPEATS):
        (tmp_path / str(n)).mkdir()
        exactly_once_at_the_second_commit(tmp_path / str(n), url, receipts)


@pytest.mark.slow  # ~25 s: the case waits out its timeout; the option's refusal below runs per push
def test_a_kill_in_the_redis_pop_window_is_its_own_finding(tmp_path: Path, receipts: tuple[str, str]) -> None:
    # the third order's message popped by the worker, never recorded: lost, every time
    schedule = "worker:during:redis.brpop#3"
    text = drill(tmp_path, REDIS, receipts, "run", "--pop-window", "--timeout", "20", "--schedule", schedule)
    assert text.startswith("rc=1\n"), text
    assert "killed by SIGKILL at during:redis.brpop#3" in text, text
    assert "cause: redis_pop_window" in text, text
    assert "in no Redis key (neither its queue nor unacked)" in text, text
    assert "Run the worker on RabbitMQ" in text, text
    assert "a lock or claim held by the killed attempt" not in text, text
    assert "1 lost" in text, text
    assert "--pop-window" in text.split("Reproduce:", 1)[1], text


def test_the_pop_window_is_refused_on_rabbitmq(tmp_path: Path, receipts: tuple[str, str]) -> None:
    args = ("run", "--pop-window", "--schedule", "worker:committed:charge_order")
    text = drill(tmp_path, AMQP, receipts, *args, refused=True)
    assert text.startswith("rc=2\n"), text
    assert "--pop-window drills the Redis transport's BRPOP window" in text, text


@pytest.mark.slow  # an inner pytest session: discovery and two cases, ~50 s on a loaded machine
def test_the_pytest_route_gives_the_same_verdicts(
    pytester: pytest.Pytester, receipts: tuple[str, str]
) -> None:
    db, table = receipts
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 20\n")
    env = {"STRIPE_API_BASE": "{KILLDRILL_FAKES_URL}", "ORDERS_DATABASE_URL": db, "ORDERS_TABLE": table}
    common = (
        f"integrations=['celery'], broker={broker(REDIS)!r}, http_fakes=True, env={env!r}, "
        f"serve={{'worker': {WORKER.split('=', 1)[1]!r}}}"
    )
    pytester.makepyfile(
        test_inner=f"""
        import pytest
        SUBMIT = {SUBMIT!r}

        @pytest.mark.killdrill(points=["worker:committed:charge_order#2"], {common})
        def test_commit(killdrill, kill_point):
            killdrill.run(SUBMIT, kill_point).assert_exactly_once()

        @pytest.mark.killdrill(points=["worker:during:redis.brpop#3"], pop_window=True, {common})
        def test_window(killdrill, kill_point):
            killdrill.run(SUBMIT, kill_point).assert_exactly_once()
        """
    )
    res = pytester.runpytest("-v")
    out = res.stdout.str()
    res.assert_outcomes(passed=1, failed=1)
    assert "test_commit[worker:committed:charge_order#2] PASSED" in out, out
    assert "redis_pop_window" in out, out
