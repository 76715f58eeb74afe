"""The Celery checkout drilled as deployed, through the CLI: two worker replicas started by
``--serve`` and ``--replicas``, the submitter as the driver.  One replica is killed mid-task while
the other keeps polling, and the survivor gets the task (Redis after the case's visibility
timeout, RabbitMQ when the dead worker's connection closes); a killed submitter is re-run and
waits for the task it sent (the task's id comes from the thread).  Every case leaves nothing
running and nothing in the broker.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from killdrill.integrations.celery.broker import keyprefix_for, vhost_for
from tests.acceptance.test_celery import AMQP, POINTS, REDIS, broker
from tests.cli_support import run_cli
from tests.frameworks import need
from tests.leftovers import survivors

need("celery", "celery", "redis")

EXAMPLE = "killdrill.examples.checkout_celery"
WORKER = f"worker=python -m {EXAMPLE} worker --name w{{replica}} --workdir {{workdir}}"
SUBMIT = ["python", "-m", EXAMPLE, "submit", "--thread", "{thread}", "--workdir", "{workdir}"]


def left_in_broker(url: str, root: Path) -> list[str]:
    """What the broker still holds of any case under ``root``: Redis keys, or RabbitMQ vhosts."""
    cases = [p for p in root.iterdir() if p.is_dir()]
    assert cases, f"no case workdir kept under {root}"
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        try:
            return [k.decode() for c in cases for k in client.scan_iter(match=keyprefix_for(c) + "*")]
        finally:
            client.close()
    names = subprocess.run(
        ["rabbitmqctl", "-q", "list_vhosts", "name"], capture_output=True, text=True, check=True
    ).stdout.split()
    return [n for c in cases for n in names if n == vhost_for(c)]


def drill(tmp_path: Path, url: str, *args: str, bug: str = "", slow: str = "0", replicas: int = 2) -> str:
    """``killdrill ARGS`` on the deployed checkout (``bug`` and ``slow`` are the submitter's task
    arguments); asserts nothing is left running or in the broker; returns rc and output."""
    root = tmp_path / "w"
    submit = [*SUBMIT, "--slow", slow, *(["--bug", bug] if bug else [])]
    out = run_cli(
        tmp_path, *args, "--integration", "celery", "--broker", broker(url), "--discovery-runs", "1",
        "--keep", "--root", str(root), "--serve", WORKER, "--replicas", f"worker={replicas}",
        "--", *submit,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert not survivors(str(root), seconds=0.3), f"a process of the case survived it:\n{text}"
    assert left_in_broker(url, root) == [], f"the case left its queues or results behind:\n{text}"
    return f"rc={out.returncode}\n{text}"


@pytest.mark.parametrize(
    "url", [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq", marks=pytest.mark.slow)]
)
def test_one_replica_killed_mid_task_the_other_charges_again(tmp_path: Path, url: str) -> None:
    # the killed replica restarts after the survivor got its task (3 s visibility timeout here)
    args = ("run", "--schedule", "worker:after:checkout", "--restart-delay", "8")
    text = drill(tmp_path, url, *args, bug="unkeyed")
    assert text.startswith("rc=1\n"), text
    assert "duplicate_effect: payments.charge" in text, text
    killed = re.search(r"\(worker\[([01])\]\) kill worker:after:checkout: killed by SIGKILL", text)
    assert killed, text
    # the evidence names each replica that made a call: the killed one and the survivor
    callers = set(re.findall(r"attempt \d+ \((worker\[[01]\])\)\s+key \(no key\)\s+created", text))
    assert callers == {"worker[0]", "worker[1]"}, text


@pytest.mark.slow
@pytest.mark.parametrize("url", [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq")])
def test_the_correct_checkout_passes_when_one_replica_is_killed_mid_task(tmp_path: Path, url: str) -> None:
    text = drill(tmp_path, url, "run", "--schedule", "worker:after:checkout")
    assert text.startswith("rc=0\n") and "EXACTLY-ONCE" in text, text


@pytest.mark.slow  # ~20 s of a drill; the unit tests cover its logic per push
def test_a_killed_submitter_is_re_run_and_waits_for_the_task_it_sent(tmp_path: Path) -> None:
    # unkeyed: a re-run that sent the task again would charge twice.  The driver has no point of
    # its own: it is killed at an offset, once it sent the task and while it waits for the result
    # (the task waits 6 s before its charge, so the result comes after the kill on a quiet machine).
    text = drill(tmp_path, REDIS, "run", "--schedule", "offset:5000ms", bug="unkeyed", slow="6")
    (case,) = (tmp_path / "w").glob("*-offset_5000ms")
    first = (case / ".killdrill" / "attempt-1.stderr").read_text()
    assert "sent checkout-" in first, f"the kill came before the task was sent:\n{first}\n{text}"
    assert text.startswith("rc=0\n") and "EXACTLY-ONCE" in text, text
    assert "(driver) kill offset:5000ms: killed by SIGKILL" in text, text
    assert "(driver) ran free: exited rc 0" in text, text


@pytest.mark.slow
def test_the_correct_deployment_passes_at_every_point_of_either_replica(tmp_path: Path) -> None:
    text = drill(tmp_path, REDIS, "drill")
    assert text.startswith("rc=0\n"), text
    for point in POINTS:
        assert f"worker:{point}" in text, text
