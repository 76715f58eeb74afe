"""SIGTERM (a CI runner cancelling the job) to a pytest session mid-drill of a Celery deployment
leaves nothing in the broker: the running case's Redis keys or RabbitMQ vhost go with it as the
session stops, as its processes and folders do (``test_pytest_sigterm``), not at the next run's
sweep.  On RabbitMQ the signal lands while the vhost is made but before its run holds it (a
slowed ``set_permissions``): no release would delete it there.  The namespaces watched are the
ones the inner session claimed (its records, in its own temporary folder): the broker is shared
with other tests' drills.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from killdrill import ownership
from tests import leftovers
from tests.acceptance.test_celery import AMQP, REDIS, broker
from tests.acceptance.test_harness_leftovers import _claims, _in_broker
from tests.acceptance.test_pytest_sigterm import _left
from tests.frameworks import need

need("celery", "celery", "redis")

TESTS = """
EX = "killdrill.examples.checkout_celery"
WORKER = "python -m " + EX + " worker --name w{replica} --workdir {workdir}"
SUBMIT = ["python", "-m", EX, "submit", "--thread", "{thread}", "--workdir", "{workdir}", "--slow", "60"]
OPTIONS = dict(integrations=("celery",), broker=BROKER, serve={"worker": WORKER})

def test_one(killdrill):
    killdrill.run(SUBMIT, "offset:50000ms", **OPTIONS).assert_exactly_once()

def test_two(killdrill):
    killdrill.run(SUBMIT, "offset:50000ms", **OPTIONS).assert_exactly_once()
"""


SLOW_PERMISSIONS = """#!/bin/sh
case "$*" in *set_permissions*) sleep 2;; esac
exec {real} "$@"
"""


@pytest.mark.parametrize(
    "url", [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq", marks=pytest.mark.slow)]
)
def test_sigterm_mid_drill_leaves_nothing_in_the_broker(pytester: pytest.Pytester, url: str) -> None:
    url = broker(url)
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 120\n")
    pytester.makepyfile(test_celery_sigterm=f"BROKER = {url!r}\n" + TESTS)
    basetemp, tmp = pytester.path / "basetemp", pytester.path / "tmp"
    tmp.mkdir()
    env = {**os.environ, **leftovers.stacks_env(), "TMPDIR": str(tmp)}
    if url.startswith("amqp"):  # the signal lands between the vhost's making and its run's holding it
        real = shutil.which("rabbitmqctl", path=f"{os.environ['PATH']}:/usr/local/sbin:/usr/sbin:/sbin")
        assert real is not None
        (pytester.path / "bin").mkdir()
        (pytester.path / "bin" / "rabbitmqctl").write_text(SLOW_PERMISSIONS.format(real=real))
        (pytester.path / "bin" / "rabbitmqctl").chmod(0o755)
        env["PATH"] = f"{pytester.path / 'bin'}:{env['PATH']}"
    env.pop("PYTEST_XDIST_WORKER", None)
    inner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            f"--basetemp={basetemp}",
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    claims: list[dict[str, object]] = []
    while not _in_broker(url, claims):  # a run holds its namespace in the broker
        if time.monotonic() > deadline or inner.poll() is not None:
            inner.kill()
            pytest.fail(f"no run ever held its namespace:\n{inner.communicate()[0].decode()}")
        time.sleep(0.1)
        claims = [c for c in _claims(tmp) if c["kind"] != ownership.FOLDER]
    inner.send_signal(signal.SIGTERM)
    try:
        out = inner.communicate(timeout=60)[0].decode()
    except subprocess.TimeoutExpired:
        pytest.fail(leftovers.hung(inner, "the session did not stop within 60 s of SIGTERM"))
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt: SIGTERM" in out and "SystemExit" not in out, out
    assert _in_broker(url, claims) == [], out
    left = _left(basetemp) + _left(tmp)
    assert left == [], f"the session left {left}\n{out}"
