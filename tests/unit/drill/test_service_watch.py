"""A deployment's services watched as they write: a service probed on a port gets its listen mark
and the bootstrap; the work lines of the settling are read whole, once each, from where the last
read stopped, and a work line split between two writes counts once it is whole."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from killdrill import envvars
from killdrill.drill.env import bootstrap_dir
from killdrill.drill.service_watch import HeldWork, ServiceWatch, listen_mark
from killdrill.process.attempts import LaunchSpec


def _spec(tmp_path: Path, number: int, env: dict[str, str] | None = None) -> LaunchSpec:
    return LaunchSpec(
        argv=["svc"], env=env or {}, cwd=None, stdout_path=str(tmp_path / f"attempt-{number}.stdout"),
        stderr_path=str(tmp_path / f"attempt-{number}.stderr"), number=number, fault=None, timeout_s=1,
    )  # fmt: skip


def test_a_service_probed_on_a_port_gets_its_listen_mark_and_the_bootstrap(tmp_path: Path) -> None:
    watch = ServiceWatch()
    if watch.files is None:
        pytest.skip("no inotify: nothing to prepare, the timer notices alone")
    try:
        port, log = _spec(tmp_path, 2, {"PYTHONPATH": "/theirs"}), _spec(tmp_path, 3)
        none = _spec(tmp_path, 4)
        watch.prepare(port, "tcp:8123")
        watch.prepare(log, "log:up")
        watch.prepare(none, None)
    finally:
        watch.close()
    assert port.env[envvars.LISTEN_MARK] == listen_mark(port) == str(tmp_path / "attempt-2.listen")
    assert port.env["PYTHONPATH"] == f"{bootstrap_dir()}:/theirs"
    assert Path(listen_mark(port)).exists() and Path(port.stderr_path).exists()  # watched from the start
    assert envvars.LISTEN_MARK not in log.env and Path(log.stdout_path).exists()  # no port: no mark
    assert not Path(none.stdout_path).exists()  # no probe: ready at its start, nothing watched


def _service(tmp_path: Path, number: int) -> Any:
    return SimpleNamespace(spec=_spec(tmp_path, number), alive=True, notes=[])


def test_the_work_lines_are_read_whole_once_each(tmp_path: Path) -> None:
    watch = ServiceWatch()
    try:
        work = HeldWork(watch, lambda: None)
        a, b = _service(tmp_path, 2), _service(tmp_path, 3)
        Path(a.spec.stderr_path).write_text("starting\nkilldrill: work pending wf-1 charge\nkilldrill: wo")
        Path(b.spec.stderr_path).write_text("")
        assert work.read([a, b])  # a work line came
        assert [(r is a, works) for r, works in work.held([a, b])] == [(True, ["charge wf-1"])]
        assert not work.read([a, b])  # nothing new
        with open(b.spec.stderr_path, "a") as f:
            f.write("killdrill: work done wf-")
        assert not work.read([a, b])  # a line begun is not read yet
        with open(b.spec.stderr_path, "a") as f:
            f.write("1\nmore output\n")
        assert work.read([a, b])
        assert work.held([a, b]) == []  # done in another service counts
        assert work.texts[id(a.spec)].count("pending wf-1") == 1  # each line read once
    finally:
        watch.close()


def test_work_said_done_while_a_dependency_was_down_is_not_counted(tmp_path: Path) -> None:
    """A Celery worker's late ack written to a broker the drill just killed: the socket took it,
    the broker never got it, the message comes back.  Its ``done``, read while the broker is
    down, is not counted (a note says so); the same run said done again once it is back is."""
    watch = ServiceWatch()
    try:
        work = HeldWork(watch, lambda: None)
        worker = _service(tmp_path, 3)
        log = Path(worker.spec.stderr_path)
        log.write_text("killdrill: work pending payout-1 task\n")
        assert work.read([worker])
        with open(log, "a") as f:
            f.write("[2026-12-07 18:18:40,200: WARNING/MainProcess] killdrill: work done payout-1\n")
        assert work.read([worker], {id(worker.spec): "its dependency rabbit"})
        assert [works for _, works in work.held([worker])] == [["task payout-1"]]
        assert worker.notes == [
            "said work payout-1 done while its dependency rabbit was down: not counted (what it told"
            " a dependency that is gone may never have reached it)"
        ]
        with open(log, "a") as f:
            f.write("killdrill: work pending payout-1 task\nkilldrill: work done payout-1\n")  # redelivered
        assert work.read([worker], {})
        assert work.held([worker]) == []
    finally:
        watch.close()


def test_a_service_listening_elsewhere_fails_only_once_idle() -> None:
    """Listening only off its probe's port for over a second: an idle service is told at once
    (``{port}`` forgotten), one still busy starting is not (RabbitMQ's cluster port comes seconds
    before AMQP's) and is looked at again a while later."""
    import os
    import socket
    import time

    from killdrill.drill.service_watch import listens_elsewhere
    from killdrill.process.readiness import busy_listening

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        probed = s.getsockname()[1] + 1 if s.getsockname()[1] < 65535 else 1024
        run: Any = SimpleNamespace(popen=SimpleNamespace(pid=os.getpid()), alive=True, spec=object())
        since: dict[int, tuple[float, float]] = {}
        assert listens_elsewhere(run, f"tcp:{probed}", since) is None  # first seen: not yet
        _, cpu = busy_listening(os.getpid())
        since[id(run.spec)] = (time.monotonic() - 2.0, cpu - 1.5)  # 1.5 s of CPU in the last 2 s
        assert listens_elsewhere(run, f"tcp:{probed}", since) is None
        assert time.monotonic() - since[id(run.spec)][0] < 1.0  # looked at again from now
        since[id(run.spec)] = (time.monotonic() - 2.0, busy_listening(os.getpid())[1])  # idle
        why = listens_elsewhere(run, f"tcp:{probed}", since)
        assert why is not None and f"not on the probed port {probed}" in why


def test_a_waiting_service_is_looked_at_for_listens_elsewhere_only_now_and_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A look walks the tree and reads the machine's TCP table: none in a launch's first
    ``LOOK_EVERY_S`` (most services are ready by then), then one per ``LOOK_EVERY_S``, not one per
    tick of the deployment's timer."""
    import time

    from killdrill.drill import service_watch

    looks: list[int] = []
    monkeypatch.setattr(service_watch, "busy_listening", lambda pid: (looks.append(pid), ({1}, 0.0))[1])
    now = time.monotonic()
    run: Any = SimpleNamespace(popen=SimpleNamespace(pid=7), alive=True, spec=object(), started=now)
    elsewhere = service_watch.Elsewhere()
    assert elsewhere.why(run, "tcp:2") is None and looks == []  # just launched
    run.started = now - service_watch.LOOK_EVERY_S
    assert elsewhere.why(run, "tcp:2") is None and looks == [7]  # first seen listening on 1: not yet
    for _ in range(5):
        assert elsewhere.why(run, "tcp:2") is None
    assert looks == [7]
    elsewhere.looked[id(run.spec)] -= service_watch.LOOK_EVERY_S
    elsewhere.since[id(run.spec)] = (now - 2 * service_watch.ELSEWHERE_S, 0.0)  # idle for long
    why = elsewhere.why(run, "tcp:2")
    assert looks == [7, 7] and why is not None and "listens on port 1, not on the probed port 2" in why
