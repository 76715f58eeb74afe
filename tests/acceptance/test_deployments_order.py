"""Services started in the order they need one another (``--after NAME=DEP[,DEP]``, as
docker-compose's ``depends_on: condition: service_healthy``): a service whose database is slow
to listen exits at start when every service starts at once, and starts once its database passed
its readiness probe with ``--after``; a ``restart=`` of the database restarts it alone, never the
services that started after it.

The order service keeps its orders in Redis and pings it once at start (``redis_shop.py``); Redis
takes 3 s to listen (``sleep 3`` before it, as a database replaying its log would).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_support import run_cli
from tests.leftovers import survivors

pytest.importorskip("redis")
DEPLOY = Path(__file__).parent.parent / "agents" / "deploy"
REDIS = "redis=sh -c \"sleep 3 && exec redis-server --port {port} --save '' --appendonly no\""
SHOP = f"api=python {DEPLOY / 'redis_shop.py'} --port {{port}} --redis {{port:redis}}"
CLIENT = [
    "python",
    str(DEPLOY / "client.py"),
    "--url",
    "http://127.0.0.1:{port:api}/orders",
    "--order",
    "{thread}",
]


def drill(tmp_path: Path, *args: str) -> tuple[int, str]:
    out = run_cli(
        tmp_path, "run", "--discovery-runs", "1", "--root", str(tmp_path / "w"),
        "--serve", REDIS, "--serve", SHOP, *args, "--", *CLIENT,
    )  # fmt: skip
    assert not survivors(str(tmp_path / "w"), seconds=0.3), "a process of the case survived it"
    return out.returncode, out.stdout + out.stderr


def test_a_service_starts_once_the_service_it_needs_is_ready(tmp_path: Path) -> None:
    rc, text = drill(tmp_path, "--schedule", "before:charge")
    assert rc == 2, text  # all at once: the order service found no Redis and exited
    assert "service api exited 1 before it was ready" in text and "ConnectionError" in text, text
    rc, text = drill(tmp_path, "--schedule", "before:charge", "--after", "api=redis")
    assert rc == 0, text
    assert "payments 1 exactly-once" in text, text
    line = text.split("Reproduce:", 1)[1]
    assert "--after api=redis" in line, line  # the line runs the case as it ran


@pytest.mark.slow  # per push: the start order itself (above)
def test_a_restarted_dependency_does_not_restart_the_services_started_after_it(tmp_path: Path) -> None:
    rc, text = drill(tmp_path, "--schedule", "restart=redis:driver:before:submit", "--after", "api=redis")
    assert rc == 0, text
    assert re.search(r"\(redis\) fault restart=redis:driver:before:submit: killed by SIGKILL", text), text
    assert re.search(
        r"service redis \(attempt \d+\) killed when before:submit was reached; ready again", text
    )
    assert len(re.findall(r"\(api\) ", text)) == 1, text  # one launch of the order service: not restarted
    assert "(api) ran free: drained" in text, text
    assert "payments 1 exactly-once" in text, text


@pytest.mark.parametrize(
    ("after", "why"),
    [
        (["api=db"], "--after api=db: no --serve service 'db' to start after (services: redis, api)"),
        (["web=redis"], "--after web: no --serve service of that name (services: redis, api)"),
        (
            ["api=redis", "redis=api"],
            "--after api: a cycle (api -> redis -> api): none of these services would",
        ),
        (["api=redis,x y"], "expected NAME=DEP[,DEP]"),
    ],
)
def test_an_order_naming_nothing_or_a_cycle_is_one_line_before_anything_starts(
    tmp_path: Path, after: list[str], why: str
) -> None:
    rc, text = drill(tmp_path, "-s", "before:charge", *[a for given in after for a in ("--after", given)])
    assert rc == 2, text
    assert why in text, text
    assert len(text.strip().splitlines()) == 1, text
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir()), text  # nothing started
