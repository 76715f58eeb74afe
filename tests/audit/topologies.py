"""The drills the audit runs: one per topology a user deploys, each a ``killdrill drill`` command line.

Each is a correct agent (a drill of it must end exactly-once, exit 0), run from the repository's
root so the bundled examples and the test agents import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).parents[2]
REDIS = "redis://127.0.0.1:6379/0"
AMQP = "amqp://guest:guest@127.0.0.1:5672//"
POSTGRES = os.environ.get("KILLDRILL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

DRIVER = """
import sys, urllib.request
import killdrill
from killdrill.fakes import connect
killdrill.boundary("before:fetch")
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=10) as r:
    assert r.status == 200
connect().payments.charge(idempotency_key=sys.argv[2] + ":charge", amount=100, currency="usd")
killdrill.boundary("after:charge")
"""
"""The deployment's driver: asks the service, then charges under a key of its thread."""


@dataclass(frozen=True)
class Topology:
    name: str
    args: tuple[str, ...]
    needs: tuple[str, ...] = ()  # "redis", "rabbitmq", "postgres": the service it needs up
    files: dict[str, str] = field(default_factory=dict)  # written into the audit's folder first
    kill_within_s: float = 1.0  # the harness killed at a random moment this long into a case


CELERY_WORKER = (
    "worker=python -m killdrill.examples.checkout_celery worker --name w{replica} --workdir {workdir}"
)
RESTART = REPO / "tests" / "agents" / "celery_restart"
RABBIT_SERVE = f"rabbit=python {RESTART / 'rabbit_serve.py'} --port {{port}} --data {{workdir}}/rabbit"
"""A RabbitMQ node of the case's own, its database in the workdir (killed and started again)."""
CELERY_SUBMIT = (
    *("python", "-m", "killdrill.examples.checkout_celery", "submit"),
    *("--thread", "{thread}", "--workdir", "{workdir}", "--slow", "0"),
)


def topologies(folder: Path) -> list[Topology]:
    """Every topology, its helper files to be written under ``folder``."""
    driver = folder / "driver.py"
    return [
        Topology(
            "plain agent",
            (
                "--",
                "python",
                "tests/agents/basic/steps.py",
                "--thread",
                "{thread}",
                "--ckpt",
                "{workdir}/c.json",
            ),
        ),
        Topology(
            "LangGraph",
            (
                *("--integration", "langgraph", "--"),
                *("python", "-m", "killdrill.examples.settlement_langgraph", "--thread", "{thread}"),
                *("--db", "{workdir}/ckpt.sqlite"),
            ),
        ),
        Topology(
            "deployment with a service",
            (
                *("--serve", "app=python -m http.server {port} --bind 127.0.0.1"),
                *("--ready", "app=http://127.0.0.1:{port}/", "--"),
                *("python", str(driver), "{port:app}", "{thread}"),
            ),
            files={str(driver): DRIVER},
        ),
        Topology(
            "Celery on Redis",
            ("--integration", "celery", "--broker", REDIS, "--serve", CELERY_WORKER, "--", *CELERY_SUBMIT),
            needs=("redis",),
        ),
        Topology(
            "Celery on RabbitMQ",
            ("--integration", "celery", "--broker", AMQP, "--serve", CELERY_WORKER, "--", *CELERY_SUBMIT),
            needs=("rabbitmq",),
        ),
        Topology(
            "Celery on a served RabbitMQ, restarted",
            (
                *("--points", "restart=rabbit:worker:during:payments.charge", "--timeout", "60"),
                *("--integration", "celery", "--serve", RABBIT_SERVE, "--after", "worker=rabbit"),
                *("--serve", f"worker=python {RESTART / 'payouts.py'} worker"),
                *("--env", "CELERY_BROKER_URL=amqp://guest:guest@127.0.0.1:{port:rabbit}//"),
                *("--env", "CELERY_RESULT_BACKEND=db+sqlite:///{workdir}/results.sqlite", "--"),
                *("python", str(RESTART / "payouts.py"), "submit", "--order", "{thread}"),
                *("--workdir", "{workdir}"),
            ),
            kill_within_s=15.0,  # the node's boot (~5 s), the charge, its restart and redelivery
        ),
        Topology(
            "DBOS",
            (
                *("--integration", "dbos", "--"),
                *(
                    "python",
                    "-m",
                    "killdrill.examples.payout_dbos",
                    "--thread",
                    "{thread}",
                    "--workdir",
                    "{workdir}",
                ),
            ),
        ),
        Topology(
            "Temporal",
            (
                *("--integration", "temporal", "--timeout", "300", "--"),
                *("python", "-m", "killdrill.examples.payout_temporal", "--thread", "{thread}"),
            ),
        ),
        Topology(
            "MCP proxy",
            (
                *(
                    "--",
                    "python",
                    "-m",
                    "killdrill.examples.booking_mcp_agent",
                    "--workdir",
                    "{workdir}",
                    "--keyed",
                ),
                *(
                    "--",
                    "python",
                    "-m",
                    "killdrill.fakes.mcp",
                    "--proxy",
                    "hotel",
                    "--key",
                    "book=request_id",
                ),
                *(
                    "--",
                    "python",
                    "-m",
                    "killdrill.examples.booking_mcp_server",
                    "--db",
                    "{workdir}/hotel.db",
                    "--dedupe",  # the correct hotel: a repeated request_id is answered, not booked again
                ),
            ),
        ),
        Topology(
            "effect rows on PostgreSQL",
            (
                *("--effect-table", "receipts(order_id)", "--effect-db", POSTGRES),
                *("--env", "DATABASE_URL={KILLDRILL_EFFECT_DB}", "--"),
                *("python", "tests/agents/db/receipts.py", "--order", "{thread}"),
            ),
            needs=("postgres",),
        ),
    ]
