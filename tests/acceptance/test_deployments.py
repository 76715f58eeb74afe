"""Deployments drilled for real through the CLI: services (``--serve``) beside a driver, a service
killed mid-request and restarted, one replica of two killed mid-task, the driver killed and
re-run, and the mistakes a user makes (a service never ready, a port taken, a driver failing),
each a one-line error or a named finding with nothing left running."""

from __future__ import annotations

import re
import socket
import sys
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
WORKER = f"worker=python {DEPLOY / 'worker.py'} --queue {{workdir}}/q --name w{{replica}}"
SUBMIT = ["python", str(DEPLOY / "submit.py"), "--queue", "{workdir}/q", "--task", "{thread}"]


def drill(tmp_path: Path, schedule: str, *args: str) -> tuple[int, str]:
    before = set(tmp_path.iterdir())
    out = run_cli(
        tmp_path, "run", "--schedule", schedule, "--discovery-runs", "1", "--root", str(tmp_path / "w"), *args
    )
    assert not survivors(str(tmp_path / "w"), seconds=0.3), "a process of the case survived it"
    assert set(tmp_path.iterdir()) - before <= {tmp_path / "w"}, "a process wrote outside its workdir"
    return out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("bug", [[], ["--bug", "nokey"]], ids=["correct", "nokey"])
def test_a_service_killed_mid_request_restarts_and_the_client_retries(tmp_path: Path, bug: list[str]) -> None:
    rc, text = drill(tmp_path, "api:during:payments.charge", "--serve", " ".join([SHOP, *bug]), "--", *CLIENT)
    if bug:
        assert rc == 1, text
        assert "duplicate_effect" in text and "(api) kill api:during:payments.charge" in text
    else:
        assert rc == 0, text
    assert "(api) ran free: drained" in text  # the restarted service, stopped at the case's end


@pytest.mark.parametrize(
    "bug", [pytest.param([], marks=pytest.mark.slow), ["--bug", "nokey"]], ids=["correct", "nokey"]
)
def test_one_replica_of_two_killed_mid_task_the_other_takes_it_over(tmp_path: Path, bug: list[str]) -> None:
    rc, text = drill(
        tmp_path,
        "worker:after:ship",
        "--serve",
        " ".join([WORKER, *bug]),
        "--replicas",
        "worker=2",
        "--",
        *SUBMIT,
    )
    assert rc == (1 if bug else 0), text
    assert "(worker[0]) kill worker:after:ship" in text or "(worker[1]) kill worker:after:ship" in text
    if bug:  # the evidence names the replica that made each call
        assert re.search(r"attempt \d+ \(worker\[[01]\]\)\s+key \(no key\)\s+created", text), text


def test_the_driver_killed_is_re_run_and_attaches_to_the_same_order(tmp_path: Path) -> None:
    rc, text = drill(
        tmp_path, "driver:after:submit", "--serve", SHOP + " --bug nokey", "--keep", "--", *CLIENT
    )
    assert rc == 0, text
    assert "(driver) kill driver:after:submit: killed by SIGKILL" in text
    assert "(driver) ran free: exited rc 0" in text


def test_a_service_killed_at_an_offset_of_its_first_launch_is_restarted_before_the_driver(
    tmp_path: Path,
) -> None:
    """``api:offset:30ms``: 30 ms into the service's own first launch (the case's start, before it
    is ready and with nothing else running), killed; started again after ``--restart-delay`` and
    the driver started once that launch is ready: a first launch is timed as a restart is, and a
    restart pending with nothing else alive keeps the case going."""
    rc, text = drill(tmp_path, "api:offset:30ms", "--restart-delay", "0.2", "--serve", SHOP, "--", *CLIENT)
    assert rc == 0, text
    assert "(api) kill api:offset:30ms: killed by SIGKILL at api:offset:30ms (rc -9)" in text, text
    started = r"\(driver\) ran free: exited rc 0[^\n]*\n\s+note: started once the services"
    assert re.search(started, text), text
    assert "(api) ran free: drained" in text, text  # the restarted launch served the driver
    assert "payments 1 exactly-once" in text, text


def test_a_service_that_never_becomes_ready_is_a_one_line_error(tmp_path: Path) -> None:
    rc, text = drill(
        tmp_path,
        "api:before:charge",
        "--serve",
        SHOP,
        "--ready",
        "api=log:NEVER",
        "--timeout",
        "2",
        "--",
        *CLIENT,
    )
    assert rc == 2, text
    line = text.strip().splitlines()[-1]
    assert "service api never became ready (log:NEVER) within 2s" in line and "serving on" in line


def test_a_port_already_taken_is_a_one_line_error_naming_the_service(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        shop = f"api=python {DEPLOY / 'shop.py'} --port {port} --state {{workdir}}/orders"
        rc, text = drill(
            tmp_path, "api:before:charge", "--serve", shop, "--ready", f"api=tcp:{port}", "--", *CLIENT
        )
    assert rc == 2, text
    line = text.strip().splitlines()[-1]
    assert f"service api: port {port} is already taken" in line


def test_a_driver_that_exits_non_zero_is_a_named_finding(tmp_path: Path) -> None:
    rc, text = drill(tmp_path, "api:before:charge", "--serve", SHOP, "--", *CLIENT, "--exit", "3")
    assert rc == 2, text  # the clean run already fails: a one-line error with the driver's status
    assert "exited 3" in text


@pytest.mark.skipif(sys.platform != "linux", reason="the process scan reads /proc")
def test_every_process_gets_the_case_env_and_the_filled_env_values(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, sys, killdrill\n"
        "with killdrill.node('x'):\n"
        "    name = os.environ['KILLDRILL_PROCESS'] + '.env'\n"
        "    open(os.path.join(os.environ['KILLDRILL_WORKDIR'], name), 'w')"
        ".write(os.environ['KILLDRILL_LEDGER'] + ' ' + os.environ['APP_URL'])\n"
        "if os.environ['KILLDRILL_PROCESS'] != 'driver':\n"
        "    import time; time.sleep(60)\n"
    )
    rc, text = drill(
        tmp_path,
        "driver:before:x",
        "--keep",
        "--serve",
        f"side=python {probe}",
        "--env",
        "APP_URL=http://127.0.0.1:{port:side}/{thread}",
        "--",
        "python",
        str(probe),
    )
    assert rc == 0, text
    (case,) = [p for p in (tmp_path / "w").iterdir() if "before_x" in p.name]
    side, driver = (case / "side.env").read_text().split(), (case / "driver.env").read_text().split()
    assert side[0] == driver[0] and side[0].endswith("ledger.sqlite")
    assert side[1] == driver[1] and side[1].startswith("http://127.0.0.1:") and "{" not in side[1]


def test_a_service_that_exits_while_the_driver_runs_is_a_named_finding(tmp_path: Path) -> None:
    quits = tmp_path / "quits.py"  # its clean runs stay up; in the case it quits mid-drive
    quits.write_text(
        "import os, time\n"
        "time.sleep(60 if os.environ['KILLDRILL_THREAD'].startswith('kd-discovery') else 0.3)\n"
        "raise SystemExit('lost the database')\n"
    )
    slow = tmp_path / "slow.py"
    slow.write_text("import time, killdrill\nwith killdrill.node('wait'):\n    time.sleep(2)\n")
    rc, text = drill(tmp_path, "after:wait", "--serve", f"db=python {quits}", "--", "python", str(slow))
    assert rc == 1, text
    assert "resume_failed: service db (attempt 2) exited 1 while the driver was still running" in text
    assert "its stderr ends with: lost the database" in text


@pytest.mark.slow
def test_a_correct_deployment_drilled_at_every_point_ten_times_has_no_false_alarm(tmp_path: Path) -> None:
    for i in range(10):
        out = run_cli(tmp_path, "drill", "--root", str(tmp_path / f"w{i}"), "--serve", SHOP, "--", *CLIENT)
        assert out.returncode == 0, out.stdout + out.stderr
        out = run_cli(
            tmp_path,
            "drill",
            "--root",
            str(tmp_path / f"r{i}"),
            "--serve",
            WORKER,
            "--replicas",
            "worker=2",
            "--",
            *SUBMIT,
        )
        assert out.returncode == 0, out.stdout + out.stderr
    assert not survivors(str(tmp_path), seconds=0.3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "bug", [[], ["--bug", "unkeyed"], ["--bug", "server_id"]], ids=["correct", "unkeyed", "server_id"]
)
def test_the_dbos_fastapi_example_as_deployed(tmp_path: Path, bug: list[str]) -> None:
    pytest.importorskip("dbos")
    app = "app=python -m killdrill.examples.outbox_dbos --port {port} --workdir {workdir} " + " ".join(bug)
    client = [
        "python",
        "-m",
        "killdrill.examples.outbox_client",
        "--url",
        "http://127.0.0.1:{port}",
        "--order",
        "{thread}",
    ]
    rc, text = drill(
        tmp_path,
        "app:during:mailbox.send",
        "--integration",
        "dbos",
        "--timeout",
        "180",
        "--serve",
        app,
        "--",
        *client,
    )
    assert rc == (1 if bug else 0), text
    if bug == ["--bug", "unkeyed"]:
        assert "duplicate_effect: mailbox.send" in text
    if bug == ["--bug", "server_id"]:  # the client re-sent its POST: a second order, named so
        assert "unexpected_effect: mailbox.send" in text and "cause: work_resubmitted" in text, text
        assert "the driver ran once (attempt 1), so its own retry re-sent the request" in text, text
        assert "unexplained" not in text, text


@pytest.mark.slow
@pytest.mark.parametrize("bug", [[], ["--bug", "unkeyed"]], ids=["correct", "unkeyed"])
def test_the_temporal_worker_and_starter_as_deployed(tmp_path: Path, bug: list[str]) -> None:
    pytest.importorskip("temporalio")
    module = "killdrill.examples.transfer_temporal"
    worker = f"worker=python -m {module} worker --task-queue {{thread}} " + " ".join(bug)
    starter = ["python", "-m", module, "starter", "--thread", "{thread}", "--task-queue", "{thread}"]
    rc, text = drill(
        tmp_path, "worker:during:payments.charge", "--integration", "temporal", "--timeout", "180",
        "--serve", worker, "--ready", "worker=log:worker polling", "--", *starter,
    )  # fmt: skip
    assert rc == (1 if bug else 0), text
    if bug:
        assert "duplicate_effect: payments.charge" in text


TRANSFER = "killdrill.examples.transfer_temporal"
TEMPORAL_PAIR = (
    "--integration", "temporal", "--timeout", "180", "--replicas", "worker=2", "--restart-delay", "8",
    "--ready", "worker=log:worker polling",
)  # fmt: skip
STARTER = ["python", "-m", TRANSFER, "starter", "--thread", "{thread}", "--task-queue", "{thread}"]


@pytest.mark.slow
def test_two_temporal_workers_one_killed_mid_activity_the_survivor_charges_again(tmp_path: Path) -> None:
    # unkeyed; the killed replica stays down 8 s, so the second charge is the surviving replica's,
    # made once the activity's start-to-close timeout (2 s) handed it over
    pytest.importorskip("temporalio")
    worker = f"worker=python -m {TRANSFER} worker --task-queue {{thread}} --bug unkeyed"
    rc, text = drill(
        tmp_path, "worker:during:payments.charge", *TEMPORAL_PAIR, "--serve", worker, "--", *STARTER
    )
    assert rc == 1 and "duplicate_effect: payments.charge" in text, text
    killed = re.search(r"\((worker\[[01]\])\) kill worker:during:payments.charge: killed by SIGKILL", text)
    assert killed, text
    callers = re.findall(r"attempt \d+ \((worker\[[01]\])\)\s+key \(no key\)\s+created", text)
    assert len(callers) == 2 and set(callers) == {"worker[0]", "worker[1]"}, text  # both replicas named
    assert callers[0] == killed.group(1), text  # the first charge is the killed replica's


@pytest.mark.slow
def test_two_correct_temporal_workers_are_exactly_once_at_every_point(tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    worker = f"worker=python -m {TRANSFER} worker --task-queue {{thread}}"
    out = run_cli(
        tmp_path, "drill", "--discovery-runs", "1", "--root", str(tmp_path / "w"), *TEMPORAL_PAIR,
        "--serve", worker, "--", *STARTER, timeout=900,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "11 cases: 11 exactly-once" in text, text
    assert not survivors(str(tmp_path / "w"), seconds=0.3)


@pytest.mark.slow
def test_chaos_drills_a_deployment_and_finds_the_unkeyed_charge(tmp_path: Path) -> None:
    out = run_cli(
        tmp_path, "chaos", "--runs", "6", "--seed", "3", "--discovery-runs", "1",
        "--root", str(tmp_path / "w"), "--serve", SHOP + " --bug nokey", "--", *CLIENT,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "duplicate_effect" in out.stdout
    assert not survivors(str(tmp_path / "w"), seconds=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("bug", [[], ["--bug", "unkeyed"]], ids=["correct", "unkeyed"])
def test_two_celery_workers_served_and_their_submitter(tmp_path: Path, bug: list[str]) -> None:
    pytest.importorskip("celery")
    module = "killdrill.examples.checkout_celery"
    submit = ["python", "-m", module, "submit", "--thread", "{thread}", "--workdir", "{workdir}", *bug]
    rc, text = drill(
        tmp_path, "worker:during:payments.charge", "--integration", "celery",
        "--serve", f"worker=python -m {module} worker", "--replicas", "worker=2", "--", *submit,
    )  # fmt: skip
    assert rc == (1 if bug else 0), text
    if bug:
        assert "duplicate_effect: payments.charge" in text
