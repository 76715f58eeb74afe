"""A harness SIGKILLed mid-drill leaves broker namespaces and folders; the next run sweeps them.

The harness (the CLI, drilling the Celery checkout deployed as a worker and a submitter) claims
each thing it makes outside its process before making it (``killdrill.ownership``); killed, its
claims stay with no living owner, and the next ``killdrill`` run on the machine removes them:
the made root with its workdirs and half-deleted folders, the Redis key prefixes or RabbitMQ
vhosts of the cases it was running.  What a living harness owns is never touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from killdrill import ownership
from tests.acceptance.test_celery import AMQP, REDIS, broker
from tests.acceptance.test_celery_deployed import SUBMIT, WORKER
from tests.frameworks import need

need("celery", "celery", "redis")


def _claims(tmp: Path) -> list[dict[str, object]]:
    out = []
    for record in (tmp / f"killdrill-owners-{os.getuid()}").glob("*.jsonl"):
        out += [json.loads(line) for line in record.read_text().splitlines() if '"claim"' in line]
    return out


def _in_broker(url: str, claims: list[dict[str, object]]) -> list[str]:
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        try:
            return [
                k.decode()
                for c in claims
                if c["kind"] == ownership.REDIS_KEYS
                for k in client.scan_iter(match=f"{c['prefix']}*")
            ]
        finally:
            client.close()
    names = subprocess.run(
        ["rabbitmqctl", "-q", "list_vhosts", "name"], capture_output=True, text=True, check=True
    ).stdout.split()
    return [str(c["vhost"]) for c in claims if c["kind"] == ownership.RABBITMQ_VHOST and c["vhost"] in names]


@pytest.mark.parametrize(
    "url", [pytest.param(REDIS, id="redis"), pytest.param(AMQP, id="rabbitmq", marks=pytest.mark.slow)]
)
def test_the_next_run_sweeps_what_a_killed_harness_left(tmp_path: Path, url: str) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    harness = subprocess.Popen(
        [
            *(sys.executable, "-m", "killdrill", "drill", "--integration", "celery", "--broker", broker(url)),
            *("--discovery-runs", "1", "--serve", WORKER, "--", *SUBMIT, "--slow", "0"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:  # mid-drill: a case (not the clean run) holds its broker namespace
        while not _in_broker(url, [c for c in _claims(tmp) if c["kind"] != ownership.FOLDER][1:]):
            assert harness.poll() is None and time.monotonic() < deadline, "the drill ended before its cases"
            time.sleep(0.1)
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    claims = _claims(tmp)
    assert _in_broker(url, claims), "nothing left in the broker to sweep: the test proves nothing"
    assert [p for p in tmp.iterdir() if p.name.startswith("killdrill-") and "owners" not in p.name]
    time.sleep(0.5)  # the killed harness's agents die with it (their keepers), off the broker
    clean = subprocess.run(
        [sys.executable, "-m", "killdrill", "clean"], env=env, capture_output=True, text=True, timeout=120
    )
    assert clean.returncode == 0, clean.stderr
    assert "removed folder" in clean.stdout, clean.stdout
    assert _in_broker(url, claims) == [], clean.stdout
    assert list(tmp.iterdir()) == [], clean.stdout  # the owners' folder too: no record is left


def test_a_living_owners_claims_are_not_swept_and_a_dead_ones_are(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    code = (
        "import sys, tempfile, time\n"
        "from killdrill import ownership\n"
        "p = tempfile.mkdtemp(prefix='killdrill-')\n"
        "ownership.claim(ownership.FOLDER, path=p)\n"
        "print(p, flush=True)\n"
        "time.sleep(60)\n"
    )
    owners = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    alive, dead = (Path(o.stdout.readline().strip()) for o in owners)  # type: ignore[union-attr]
    owners[1].kill()
    owners[1].wait()
    try:
        clean = subprocess.run(
            [sys.executable, "-m", "killdrill", "clean"], env=env, capture_output=True, text=True, timeout=60
        )
        assert clean.returncode == 0, clean.stderr
        assert alive.is_dir() and not dead.exists(), clean.stdout
        assert clean.stdout.startswith(f"removed folder {dead}\n"), clean.stdout
    finally:
        owners[0].kill()
        owners[0].wait()
        for o in owners:
            o.stdout.close()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "options",
    [("--broker", "nonsense://x"), ("--broker", AMQP, "--pop-window")],
    ids=["scheme", "pop-window-on-amqp"],
)
def test_an_integration_option_refused_as_its_service_starts_leaves_no_folder(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "killdrill", "drill", "--integration", "celery", *options, "--", *SUBMIT],
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--broker" in proc.stderr
    assert list(tmp.iterdir()) == []


SLOW_CTL = """#!/bin/sh
echo $$ > "$KD_CTL_PIDS"
sleep 20
touch "$KD_CTL_PIDS.added"
"""

ADDS = """
from pathlib import Path
from killdrill.integrations.celery.broker import CeleryBroker
from killdrill.process.forks import WardenHost
CeleryBroker(Path({root!r}), {{"broker": {url!r}}}, WardenHost())._rabbitmqctl("add_vhost", "kd-x")
"""


def test_rabbitmqctl_dies_with_a_killed_harness_and_adds_nothing_after_it(tmp_path: Path) -> None:
    """A vhost added after the harness died (rabbitmqctl is an Erlang VM of seconds) would come
    after the next run swept the harness's claim: it dies with the harness, as a service does."""
    bin_dir, pids = tmp_path / "bin", tmp_path / "ctl.pid"
    bin_dir.mkdir()
    (bin_dir / "rabbitmqctl").write_text(SLOW_CTL)
    (bin_dir / "rabbitmqctl").chmod(0o755)
    (tmp_path / "root").mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KD_CTL_PIDS": str(pids)}
    code = ADDS.format(root=str(tmp_path / "root"), url=AMQP)
    harness = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not pids.exists() or not pids.read_text().strip():
        assert harness.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    ctl = int(pids.read_text())
    harness.kill()
    harness.wait()
    deadline = time.monotonic() + 10
    while _alive(ctl) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(ctl), "rabbitmqctl outlived the harness"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")
