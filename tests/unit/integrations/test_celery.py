"""The Celery integration in-process: the points' names, the Redis channel's case settings, and a
RabbitMQ vhost a run cannot use."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import need

need("celery", "celery", "kombu")

from celery import Celery  # noqa: E402

from killdrill.integrations import celery as integration  # noqa: E402
from killdrill.integrations.celery import settings  # noqa: E402


@pytest.fixture
def active() -> Iterator[None]:
    integration.activate()
    yield
    integration.deactivate()


def test_a_task_is_named_as_written() -> None:
    app = Celery("shop", set_as_current=False)

    @app.task
    def charge_order() -> None: ...

    @app.task(name="billing.send receipt")
    def send() -> None: ...

    assert integration.task_point_name(charge_order) == "charge_order"  # the generated name's function
    assert integration.task_point_name(send) == "billing.send_receipt"  # name= as given, made a point


def test_the_redis_channel_takes_the_case_prefix_and_a_short_visibility(
    active: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu.transport import redis

    channel = redis.Channel.__new__(redis.Channel)  # attributes only: no connection
    monkeypatch.delenv(integration.KEYPREFIX_ENV, raising=False)
    monkeypatch.delenv(integration.VISIBILITY_ENV, raising=False)
    assert (channel.global_keyprefix, channel.visibility_timeout) == ("", 3600)  # outside a case
    monkeypatch.setenv(integration.KEYPREFIX_ENV, "killdrill-abc:")
    monkeypatch.setenv(integration.VISIBILITY_ENV, "3")
    channel.global_keyprefix = "app:"  # the app's own transport option, set when a channel opens
    channel.visibility_timeout = 7200
    assert channel.global_keyprefix == "killdrill-abc:app:"
    assert channel.visibility_timeout == 3 and channel.unacked_restore_throttle == 1
    channel.visibility_timeout = 1  # an app's smaller timeout is kept
    assert channel.visibility_timeout == 1
    assert redis.Channel.unacked_restore_interval == 1  # the sweep's timer reads the class's number


def _attempt(number: int, points: list[tuple[str, float]], killed: bool) -> Any:
    from killdrill.records import Attempt, TraceEvent

    trace = tuple(TraceEvent(p, 1, t, 1) for p, t in points)
    return Attempt(
        number, points[-1][0] if killed else None, "killed" if killed else "exited", -9 if killed else 0,
        5000.0, trace, killed_at=points[-1][0] if killed else None, signal="SIGKILL" if killed else None,
    )  # fmt: skip


def test_a_resume_that_got_the_task_later_than_a_fresh_worker_did_waited_on_the_visibility(
    tmp_path: Path,
) -> None:
    from killdrill.integrations.celery.broker import CeleryBroker

    broker = CeleryBroker(tmp_path, None)  # Redis: the default; nothing is reached to answer this
    killed = _attempt(1, [("before:checkout", 2000.0), ("during:payments.charge", 2010.0)], killed=True)
    resumed = _attempt(2, [("before:checkout", 3500.0), ("committed:checkout", 3600.0)], killed=False)
    (wait,) = broker.waits(tmp_path, "t", [(100.0, killed), (110.0, resumed)])
    assert wait["unit"] == "task checkout" and wait["setting_s"] == broker.visibility_s
    assert (wait["from"], wait["to"]) == pytest.approx((112.0, 113.5))
    assert "visibility timeout" in wait["label"]
    # a kill after the ack left nothing for the broker to hold
    acked = _attempt(1, [("before:checkout", 2000.0), ("committed:checkout", 2100.0)], killed=True)
    assert broker.waits(tmp_path, "t", [(100.0, acked), (110.0, resumed)]) == []


def test_the_visibility_timeout_is_the_drills_option_and_reaches_the_workers(tmp_path: Path) -> None:
    from killdrill.integrations import check_options
    from killdrill.integrations.celery.broker import CeleryBroker
    from killdrill.options import DrillOptions

    assert CeleryBroker(tmp_path, None).visibility_s == settings.VISIBILITY_TIMEOUT_S
    given = DrillOptions(integrations=("celery",), integration_options={"visibility_timeout": "20s"})
    broker = CeleryBroker(tmp_path, replace(given, integration_options=check_options(given)))
    assert broker.visibility_s == 20.0
    acks = _attempt(1, [("before:checkout", 2000.0), ("during:payments.charge", 2010.0)], killed=True)
    again = _attempt(2, [("before:checkout", 3500.0)], killed=False)
    (wait,) = broker.waits(tmp_path, "t", [(100.0, acks), (110.0, again)])
    assert wait["setting"] == "--visibility-timeout" and wait["setting_s"] == 20.0


def test_a_deployments_task_waits_from_the_kill_to_whichever_replica_took_it(tmp_path: Path) -> None:
    from dataclasses import replace

    from killdrill.integrations.celery.broker import CeleryBroker

    broker = CeleryBroker(tmp_path, None)
    killed = _attempt(2, [("before:checkout", 2000.0), ("during:payments.charge", 2010.0)], killed=True)
    killed = replace(killed, duration_ms=2020.0, process="worker[0]")  # killed at 102.02
    survivor = _attempt(3, [("before:checkout", 7500.0), ("committed:checkout", 7600.0)], killed=False)
    survivor = replace(survivor, process="worker[1]")  # started at 100.0: took it at 107.5
    restarted = replace(_attempt(4, [("before:other", 10.0)], killed=False), process="worker[0]")
    timeline = [(100.0, killed), (103.0, restarted), (100.0, survivor)]
    (wait,) = broker.waits(tmp_path, "t", timeline)
    assert (wait["from"], wait["to"]) == pytest.approx((102.02, 107.5))
    assert wait["unit"] == "task checkout" and "broker's contract" in wait["kept"]


FAILING_CTL = """#!/bin/sh
echo "$@" >> "$KD_CTL_LOG"
case "$*" in *set_permissions*) echo "Error: no_such_user" >&2; exit 70;; esac
"""


def test_a_vhost_whose_permissions_cannot_be_set_is_deleted_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run cannot use it, and its claim goes with it: nothing is left for a sweep to find."""
    import os
    import socket
    import tempfile
    from types import SimpleNamespace

    from killdrill import ownership
    from killdrill.errors import HarnessError
    from killdrill.integrations.celery.broker import CeleryBroker

    bin_dir, log = tmp_path / "bin", tmp_path / "ctl.log"
    bin_dir.mkdir()
    (bin_dir / "rabbitmqctl").write_text(FAILING_CTL)
    (bin_dir / "rabbitmqctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("KD_CTL_LOG", str(log))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's claims' records
    with socket.create_server(("127.0.0.1", 0)) as listening:  # the broker answers its port
        url = f"amqp://nobody:x@127.0.0.1:{listening.getsockname()[1]}//"
        broker = CeleryBroker(tmp_path, SimpleNamespace(integration_options={"broker": url}))
        with pytest.raises(HarnessError, match="set_permissions"):
            broker.env(tmp_path / "001-case", "t")
    [add, _, delete] = log.read_text().splitlines()
    vhost = add.split()[-1]
    assert add == f"-q add_vhost {vhost}" and delete == f"-q delete_vhost {vhost}"
    records = ownership.registry_dir().glob("*.jsonl")
    assert [c for r in records for c in ownership._open_claims(r.read_text())] == []  # nor its claim


@pytest.mark.parametrize("during", ["add_vhost", "set_permissions"])
def test_a_vhost_whose_run_is_interrupted_before_holding_it_is_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, during: str
) -> None:
    """Ctrl-C or SIGTERM while the vhost is being made (a pytest session's SIGTERM arrives as
    KeyboardInterrupt): no run holds it yet, so no release would delete it; it goes at once."""
    import socket
    import tempfile
    from types import SimpleNamespace

    from killdrill import ownership
    from killdrill.integrations.celery.broker import CeleryBroker

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    said: list[tuple[str, ...]] = []

    def ctl(self: CeleryBroker, *args: str) -> str:
        said.append(args)
        if args[0] == during:
            raise KeyboardInterrupt("SIGTERM")
        return ""

    monkeypatch.setattr(CeleryBroker, "_rabbitmqctl", ctl)
    with socket.create_server(("127.0.0.1", 0)) as listening:
        url = f"amqp://guest:guest@127.0.0.1:{listening.getsockname()[1]}//"
        broker = CeleryBroker(tmp_path, SimpleNamespace(integration_options={"broker": url}))
        with pytest.raises(KeyboardInterrupt):
            broker.env(tmp_path / "001-case", "t")
    vhost = said[0][-1]
    assert said[-1] == ("delete_vhost", vhost)
    records = ownership.registry_dir().glob("*.jsonl")
    assert [c for r in records for c in ownership._open_claims(r.read_text())] == []
