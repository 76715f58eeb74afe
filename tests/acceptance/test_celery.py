"""The Celery integration on real brokers (the local Redis and RabbitMQ), real workers, real kills.

Every drill runs the bundled checkout example (killdrill/examples/checkout_celery.py) in its
one-command form: the driver forks a worker and submits the task; a kill takes the whole process
group, worker included, and the re-run driver's worker gets the task the broker hands on (Redis
after the case's visibility timeout, RabbitMQ when the dead worker's connection closes).  The
fork launcher imports Celery once.  A broker that does not answer skips its tests, unless
``KILLDRILL_REQUIRE_CELERY=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.errors import HarnessError
from killdrill.integrations.celery.broker import CeleryBroker, keyprefix_for, vhost_for
from killdrill.options import OptionError
from tests.frameworks import need

need("celery", "celery", "redis")

EXAMPLE = "killdrill.examples.checkout_celery"
REDIS = "redis://127.0.0.1:6379/0"
AMQP = "amqp://guest:guest@127.0.0.1:5672//"
FORK: dict[str, Any] = {"launcher": "fork", "preload": (EXAMPLE,)}
POINTS = (
    "before:checkout",
    "during:payments.charge",
    "during:webhooks.post",
    "after:checkout",
    "committed:checkout",
)


def _up(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def broker(url: str) -> str:
    """``url`` when its broker answers; else skip (fail under KILLDRILL_REQUIRE_CELERY=1)."""
    port = 6379 if url.startswith("redis") else 5672
    if not _up(port):
        why = f"no broker answers at 127.0.0.1:{port} ({url})"
        if os.environ.get("KILLDRILL_REQUIRE_CELERY") == "1":
            pytest.fail(f"{why}: KILLDRILL_REQUIRE_CELERY=1 requires it", pytrace=False)
        pytest.skip(why)
    return url


BROKERS = [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq")]


def left_in_broker(url: str, workdir: Path) -> list[str]:
    """What the broker still holds of the run in ``workdir``: its Redis keys, or its vhost."""
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        try:
            return [k.decode() for k in client.scan_iter(match=keyprefix_for(workdir) + "*")]
        finally:
            client.close()
    names = subprocess.run(
        ["rabbitmqctl", "-q", "list_vhosts", "name"], capture_output=True, text=True, check=True
    )
    return [n for n in names.stdout.split() if n == vhost_for(workdir)]


def command(bug: str | None = None) -> list[str]:
    cmd = ["python", "-m", EXAMPLE, "drive", "--thread", "{thread}", "--workdir", "{workdir}"]
    return [*cmd, "--bug", bug] if bug else cmd


def drill(tmp_path: Path, url: str, bug: str | None = None, **options: Any) -> Drill:
    base = DrillOptions(
        root=tmp_path,
        integrations=("celery",),
        integration_options={"broker": broker(url)},
        timeout=60,
        discovery_runs=1,
    )
    return Drill(command(bug), base, **{**FORK, **options})


def expect(d: Drill, cases: dict[str, tuple[str, ...]]) -> None:
    """Run each case; ``()`` means exactly-once, else the violation kinds it must show."""
    for schedule, kinds in cases.items():
        result = d.run_case(schedule)
        assert result.kinds == kinds, f"{schedule}:\n{result.text()}"
        assert result.attempts[0].killed_at == schedule, result.text()


@pytest.mark.parametrize(  # RabbitMQ (25 s) under -m slow: test_celery_deployed redelivers on it per push
    "url", [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq", marks=pytest.mark.slow)]
)
def test_a_redelivered_unkeyed_charge_is_caught_where_the_ack_was_not_sent(tmp_path: Path, url: str) -> None:
    # after the body, before the ack: the broker delivers the task again and the charge lands twice
    # (after the ack it never hands it on: the slow test below drills every point).
    with drill(tmp_path, url, "unkeyed") as d:
        assert set(POINTS) <= set(d.points())
        result = d.run_case("after:checkout")
        assert result.kinds == ("duplicate_effect",), result.text()
        (violation,) = result.violations
        assert violation.cause == "no_key", result.text()
        contexts = [c["context"] for c in violation.detail["calls"]]
        assert [c["redelivered"] for c in contexts] == [False, True], contexts
        assert {c["name"] for c in contexts} == {"checkout"} and {c["runtime"] for c in contexts} == {
            "celery"
        }
        assert len({c["worker"] for c in contexts}) == 2, "each delivery names its worker"
    assert left_in_broker(url, Path(result.workdir)) == [], "the case left its queues or results behind"


@pytest.mark.slow
def test_a_key_taken_from_the_delivery_is_caught(tmp_path: Path) -> None:
    with drill(tmp_path, REDIS, "delivery-key") as d:
        expect(d, {"after:checkout": ("duplicate_effect", "key_changed"), "before:checkout": ()})


@pytest.mark.slow
@pytest.mark.parametrize("url", BROKERS)
def test_the_correct_checkout_passes_every_point(tmp_path: Path, url: str) -> None:
    with drill(tmp_path, url) as d:
        expect(d, dict.fromkeys(POINTS, ()))


def _publish(env: dict[str, str]) -> None:
    """Send one task through Celery under the drill's environment, as an agent of the case does."""
    code = f"from {EXAMPLE} import checkout; checkout.apply_async(args=('o-1', 1, 'a@b.c'), task_id='t-1')"
    bootstrap = Path(__file__).parents[2] / "killdrill" / "integrations" / "_bootstrap"
    full = {**os.environ, **env, "KILLDRILL_INTEGRATIONS": "celery", "PYTHONPATH": str(bootstrap)}
    subprocess.run([sys.executable, "-c", code], env=full, check=True, timeout=60)


def test_a_run_on_redis_lives_under_its_own_prefix_and_leaves_nothing(tmp_path: Path) -> None:
    service = CeleryBroker(
        tmp_path, DrillOptions(integrations=("celery",), integration_options={"broker": broker(REDIS)})
    )
    a, b = tmp_path / "case-a", tmp_path / "case-b"
    try:
        env = service.env(a, "same-thread")
        assert env["CELERY_BROKER_URL"] == REDIS and env["KILLDRILL_CELERY_VISIBILITY_TIMEOUT"] == "3"
        assert (
            service.env(b, "same-thread")["KILLDRILL_CELERY_KEYPREFIX"] != env["KILLDRILL_CELERY_KEYPREFIX"]
        )
        _publish(env)
        keys = service.keys(a)
        assert any(k.endswith(":celery") for k in keys), keys  # the default queue, under a's prefix
        assert service.keys(b) == []
        service.release(a, "same-thread")
        assert service.keys(a) == []
    finally:
        service.close()
    assert not [k for k in service._client().scan_iter(match=keyprefix_for(b) + "*")]


@pytest.mark.slow  # the default test's RabbitMQ drill checks its vhost is gone; this one looks inside
def test_a_run_on_rabbitmq_gets_a_vhost_of_its_own_and_leaves_nothing(tmp_path: Path) -> None:
    service = CeleryBroker(
        tmp_path, DrillOptions(integrations=("celery",), integration_options={"broker": broker(AMQP)})
    )
    run = tmp_path / "case-a"
    try:
        env = service.env(run, "t")
        vhost = env["CELERY_BROKER_URL"].rsplit("/", 1)[1]
        assert vhost in service.vhosts()
        _publish(env)
        queues = subprocess.run(
            ["rabbitmqctl", "-q", "list_queues", "-p", vhost, "name", "messages"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert "celery\t1" in queues, queues
        service.release(run, "t")
        assert vhost not in service.vhosts()
    finally:
        service.close()


def test_a_broker_that_is_down_is_one_line_naming_it(tmp_path: Path) -> None:
    url = "redis://:secret@127.0.0.1:1/0"
    service = CeleryBroker(
        tmp_path, DrillOptions(integrations=("celery",), integration_options={"broker": url})
    )
    with pytest.raises(HarnessError) as raised:
        service.env(tmp_path / "case", "t")
    text = str(raised.value)
    assert "\n" not in text and "redis://:***@127.0.0.1:1/0" in text and "secret" not in text, text


def test_the_cli_says_a_broker_that_is_down_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "killdrill", "points", "--integration", "celery", "--root", str(tmp_path),
         "--broker", "amqp://guest:guest@127.0.0.1:1//", "--", *command()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "amqp://guest:***@127.0.0.1:1//" in lines[0], done.stderr
    assert not list(tmp_path.iterdir()), "a failed start left its discovery folder behind, unprinted"


def test_broker_without_the_celery_integration_is_a_usage_error(tmp_path: Path) -> None:
    """``--broker`` is the Celery record's own option row: given without the integration, the drill
    names it as the caller spelled it, before anything runs."""
    with pytest.raises(OptionError, match=r"^broker= needs integrations= celery"):
        Drill(command(), DrillOptions(root=tmp_path), broker=REDIS)
    done = subprocess.run(
        [sys.executable, "-m", "killdrill", "points", "--broker", REDIS, "--", *command()],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "killdrill: error: --broker needs --integration celery (an option of that integration)"
    ], done.stderr


@pytest.mark.slow
def test_a_long_task_on_a_live_prefork_worker_runs_once(tmp_path: Path) -> None:
    # A body 4x the visibility timeout: the prefork parent sweeps the unacked set every second,
    # and would hand the task to its second child while the first still runs it, but the live
    # worker keeps its delivery fresh; its points are reached in a child, its ack in the parent.
    base = DrillOptions(
        root=tmp_path,
        integrations=("celery",),
        integration_options={"broker": broker(REDIS), "visibility_timeout": 1},
        timeout=60,
        discovery_runs=1,
    )
    with Drill([*command(), "--slow", "4", "--pool", "prefork"], base, **FORK) as d:
        assert sorted(d.points()) == sorted(POINTS), d.points()


@pytest.mark.slow
def test_a_hang_names_the_unacknowledged_task_and_the_visibility_timeout(tmp_path: Path) -> None:
    # Redis's own default (3600 s) left in place: the killed worker's task waits in the unacked
    # set, the re-run submitter waits for it, and the hang says why.
    with drill(tmp_path, REDIS, timeout=15, visibility_timeout=3600) as d:
        result = d.run_case("before:checkout")
    assert "hang" in result.kinds, result.text()
    hang = next(v for v in result.violations if v.kind == "hang")
    assert "1 unacknowledged task(s)" in hang.message and "(3600s here)" in hang.message, hang.message
    assert hang.cause == "task_not_taken" and "3600 s here" in hang.observed, hang
