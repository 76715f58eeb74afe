"""A dependency that dies under a running agent, drilled for real: ``restart=SERVICE:TRIGGER``
kills a ``--serve`` service when another process reaches a point and the deployment starts it
again; the target and the trigger are named apart, the process that reached the trigger goes on.

The order service and its client (``tests/agents/deploy``): the service dies as the client is
about to post, and the client's retries reach the restarted service.  A Celery worker on a Redis
the drill started, Redis killed as the worker's charge landed (``-m slow``: a Celery worker's
start and the outage cost ~10 s a case): with Celery's defaults the task's result is never
stored (the outage ate it) and the submitter waits forever, a hang whose cause is the restart
(``dependency_restarted``, with the fix); with
``result_backend_always_retry`` the result is stored once Redis is back: exactly-once.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from tests.cli_support import run_cli
from tests.leftovers import survivors

DEPLOY = Path(__file__).parent.parent / "agents" / "deploy"
SHOP = f"api=python {DEPLOY / 'shop.py'} --port {{port}} --state {{workdir}}/orders"
CLIENT = [
    "python",
    str(DEPLOY / "client.py"),
    "--url",
    "http://127.0.0.1:{port}/orders",
    "--order",
    "{thread}",
]
PAYOUTS = Path(__file__).parent.parent / "agents" / "celery_restart" / "payouts.py"


def drill(tmp_path: Path, *args: str) -> tuple[int, str]:
    out = run_cli(tmp_path, "run", "--discovery-runs", "1", "--root", str(tmp_path / "w"), *args)
    assert not survivors(str(tmp_path / "w"), seconds=0.3), "a process of the case survived it"
    return out.returncode, out.stdout + out.stderr


def test_a_service_killed_when_the_client_reaches_a_point_is_restarted(tmp_path: Path) -> None:
    rc, text = drill(
        tmp_path, "--schedule", "restart=api:driver:before:submit", "--serve", SHOP, "--", *CLIENT
    )
    assert rc == 0, text
    assert re.search(r"\(api\) fault restart=api:driver:before:submit: killed by SIGKILL", text), text
    assert "(api) ran free: drained" in text  # started again, stopped at the case's end
    assert "api killed and restarted here (restart=api:driver:before:submit)" in text  # the client's note
    assert re.search(
        r"service api \(attempt 2\) killed when before:submit was reached;"
        r" ready again \(attempt 3\) \d+ ms later",
        text,
    ), text
    assert "(driver) fault restart=api:driver:before:submit: exited rc 0" in text  # it went on


@pytest.mark.slow
@pytest.mark.parametrize("retry", ["0", "1"], ids=["defaults", "result_backend_always_retry"])
def test_a_celery_worker_whose_redis_restarts_mid_task(tmp_path: Path, retry: str) -> None:
    pytest.importorskip("celery")
    rc, text = drill(
        tmp_path,
        "--schedule", "restart=redis:worker:during:payments.charge",
        "--restart-delay", "1", "--timeout", "15",
        "--integration", "celery",
        "--serve", "redis=redis-server --port {port} --save '' --appendonly no",
        "--serve", f"worker=python {PAYOUTS} worker",
        "--env", "CELERY_BROKER_URL=redis://127.0.0.1:{port:redis}/0",
        "--env", "CELERY_RESULT_BACKEND=redis://127.0.0.1:{port:redis}/1",
        "--env", f"PAYOUTS_RESULT_RETRY={retry}",
        "--", "python", str(PAYOUTS), "submit", "--order", "{thread}", "--workdir", "{workdir}",
    )  # fmt: skip
    assert "payments 1 exactly-once" in text, text  # the payout was made once either way
    assert re.search(r"\(redis\) fault restart=redis:worker:during:payments\.charge: killed by SIGKILL", text)
    if retry == "1":
        assert rc == 0, text
    else:
        assert rc == 1, text
        assert "hang: attempt 1 hung" in text, text
        assert "cause: dependency_restarted" in text and "result_backend_always_retry=True" in text, text
        assert "the run's dependency redis (attempt 2, restart=redis:worker:during:payments.charge)" in text
        assert "the Celery broker (" not in text, text  # the integration's own broker: not the one used


def test_a_proxy_between_a_celery_worker_and_its_served_redis_is_cut_at_the_workers_point(
    tmp_path: Path,
) -> None:
    """``--proxy r=redis://127.0.0.1:{port:redis}``: the service's own dependency behind the
    drill's proxy; ``cut=r:worker:during:payments.charge`` closes every connection through it as
    the worker's charge lands, Redis keeps running and the worker reconnects: exactly-once."""
    pytest.importorskip("celery")
    rc, text = drill(
        tmp_path,
        "--schedule", "cut=r:worker:during:payments.charge", "--timeout", "20",
        "--integration", "celery",
        "--serve", "redis=redis-server --port {port} --save '' --appendonly no",
        "--proxy", "r=redis://127.0.0.1:{port:redis}",
        "--serve", f"worker=python {PAYOUTS} worker",
        "--env", "CELERY_BROKER_URL=redis://127.0.0.1:{proxy:r}/0",
        "--env", "CELERY_RESULT_BACKEND=redis://127.0.0.1:{proxy:r}/1",
        "--", "python", str(PAYOUTS), "submit", "--order", "{thread}", "--workdir", "{workdir}",
    )  # fmt: skip
    assert rc == 0, text
    assert "payments 1 exactly-once" in text, text
    assert re.search(r"\(worker\) fault cut=r:worker:during:payments\.charge: drained", text), text
    assert re.search(r"note: \d+ connections? through proxy r closed at during:payments\.charge", text), text
    assert "(redis) ran free" in text, text  # the dependency did not go down


RABBIT = Path(__file__).parent.parent / "agents" / "celery_restart" / "rabbit_serve.py"


@pytest.mark.parametrize(
    "key", [pytest.param("keyed", marks=pytest.mark.slow), "none"], ids=["keyed", "no_key"]
)  # a broker's start costs ~5 s, twice a case: the catch per push
def test_a_celery_worker_whose_rabbitmq_restarts_mid_task(tmp_path: Path, key: str) -> None:
    """RabbitMQ as a dependency the drill serves (``rabbit_serve.py``: a node of its own on the
    case's port, its database in the workdir, kept across the kill) and restarts as the worker's
    charge lands.  The worker's late ack is written to a socket whose broker is gone: the ack
    never reached it, the persistent message comes back after the restart and the task runs
    again.  The case waits for that: work a client of the dead broker said done is not counted
    (ended before the redelivery, the case would pass the unkeyed charge)."""
    pytest.importorskip("celery")
    pytest.importorskip("sqlalchemy")
    if not Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists():
        pytest.skip("needs Debian's rabbitmq-server package")
    rc, text = drill(
        tmp_path,
        "--schedule", "restart=rabbit:worker:during:payments.charge", "--timeout", "60", "--keep",
        "--integration", "celery",
        "--serve", f"rabbit=python {RABBIT} --port {{port}} --data {{workdir}}/rabbit",
        "--serve", f"worker=python {PAYOUTS} worker", "--after", "worker=rabbit",
        "--env", "CELERY_BROKER_URL=amqp://guest:guest@127.0.0.1:{port:rabbit}//",
        "--env", "CELERY_RESULT_BACKEND=db+sqlite:///{workdir}/results.sqlite",
        "--env", f"PAYOUTS_KEY={key}",
        "--", "python", str(PAYOUTS), "submit", "--order", "{thread}", "--workdir", "{workdir}",
    )  # fmt: skip
    assert re.search(
        r"\(rabbit\) fault restart=rabbit:worker:during:payments\.charge: killed by SIGKILL", text
    )
    assert re.search(r"service rabbit \(attempt 2\) killed when during:payments\.charge was reached;"
                     r" ready again \(attempt 4\)", text), text  # fmt: skip
    assert not re.search(r"\(rabbit\) ran free: drained[^\n]*\n[^\n]*ignored SIGTERM", text), (
        text
    )  # stops at once
    (case,) = [d for d in (tmp_path / "w").iterdir() if d.name.startswith("002-restart")]
    with sqlite3.connect(case / ".killdrill" / "ledger.sqlite") as db:
        outcomes = [
            o for (o,) in db.execute("select outcome from killdrill_calls where provider = 'payments'")
        ]
    if key == "keyed":
        assert outcomes == ["created", "replayed"], outcomes  # delivered again, the key replayed
        assert rc == 0, text
        assert "payments 1 exactly-once" in text, text
    else:
        assert outcomes == ["created", "created"], outcomes
        assert rc == 1, text
        assert "duplicate_effect: payments.charge" in text, text
        assert "its dependency rabbit was restarted under it" in text, text
