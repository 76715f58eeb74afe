"""The deployment's processes: names, replicas, ports kept per case, placeholders, mistakes."""

from __future__ import annotations

import pytest

from killdrill.drill.topology import Topology
from killdrill.errors import UsageError
from killdrill.options import DrillOptions, OptionError, Spelling
from killdrill.points import ScheduleError, parse_fault

DRIVER = ["python", "client.py", "--url", "http://127.0.0.1:{port}/{thread}"]


def topo(spelled: Spelling = Spelling.FLAG, **kw: object) -> Topology:
    return Topology(DrillOptions(**kw, spelled=spelled), DRIVER)  # type: ignore[arg-type]


def test_ports_placeholders_and_replicas_are_filled_per_process() -> None:
    t = topo(
        serve=[
            "api=python app.py --port {port}",
            "python worker.py --name w{replica} --port {port} --api {port:api}",
        ],
        replicas={"worker": 2},
        env={"APP": "{workdir}/{port:api}"},
    )
    api, w0, w1, driver = t.processes("kd-1", "/wd")
    assert [p.name for p in (api, w0, w1, driver)] == ["api", "worker[0]", "worker[1]", "driver"]
    port = api.argv[-1]
    assert driver.argv[-1] == f"http://127.0.0.1:{port}/kd-1"
    assert w0.argv[3] == "w0" and w1.argv[3] == "w1"
    assert w0.argv[5] != w1.argv[5] != port and w0.argv[7] == w1.argv[7] == port
    assert api.ready == f"tcp:{port}" and w1.ready == f"tcp:{w1.argv[5]}"
    assert driver.env["APP"] == f"/wd/{port}" and w1.env["KILLDRILL_PROCESS"] == "worker[1]"


def test_an_unnamed_service_is_named_for_its_script_and_a_service_without_port_is_ready_at_once() -> None:
    (worker, _) = topo(serve=["python -m app.worker"]).processes("t", "/wd")
    assert worker.name == "worker" and worker.ready is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"serve": ["api=python a.py"], "ready": {"web": "tcp:1"}},
            "--ready web: no --serve service of that name",
        ),
        ({"serve": ["api=python a.py"], "replicas": {"web": 2}}, "--replicas web: no --serve service"),
        ({"serve": ["driver=python a.py"]}, "'driver' names the command after --"),
        ({"serve": ["api=python a.py"], "ready": {"api": "tcp:x"}}, "tcp:PORT needs a port number"),
        ({"serve": ["api=python a.py"], "resumers": 2}, "--serve does not go with --resumers"),
    ],
)
def test_mistakes_are_one_line_errors(kw: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("[", r"\[")) as err:
        topo(**kw)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad", [{"ready": ["api"]}, {"ready": ["api=ftp://x"]}, {"replicas": ["api=0"]}])
def test_option_values_are_checked(bad: dict[str, object]) -> None:
    with pytest.raises(OptionError):
        DrillOptions(**bad)  # type: ignore[arg-type]


def test_name_point_aims_at_one_process_and_prints_back() -> None:
    assert parse_fault("api:before:charge#2").process == "api"
    assert str(parse_fault("worker[1]:during:payments.charge")) == "worker[1]:during:payments.charge"
    assert parse_fault("before:charge").process is None
    with pytest.raises(ScheduleError, match="after api: unknown kind 'bogus'"):
        parse_fault("api:bogus:x")


def test_placeholders_fill_every_probe_and_env_value() -> None:
    t = topo(
        serve=["app=python app.py --port {port}", "python w.py --name w{replica}"],
        replicas={"w": 2},
        ready={"app": "tcp:{port}", "w": "log:{thread} up"},
        env={"DB": "sqlite:///{workdir}/db", "W1": "{port:w[1]}", "R": "{replica}"},
    )
    app, w0, w1, driver = t.processes("kd-7", "/wd")
    assert w0.env["R"] == "0" and app.ready == f"tcp:{app.argv[-1]}" and w1.ready == "log:kd-7 up"
    assert driver.env["DB"] == "sqlite:////wd/db" and "{" not in driver.env["W1"]
    assert w1.env["R"] == "1" and driver.env["R"] == "0"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"env": {"X": "{port:missing}"}},
            "--env X: {port:missing}: no --serve service named 'missing' (services: api)",
        ),
        (
            {"env": {"X": "{port:api[5]}"}},
            "--env X: {port:api[5]}: service api runs 1 copy (the last is {port:api[0]})",
        ),
        ({"env": {"X": "{port:api[-1]}"}}, "--env X: {port:api[-1]}: expected {port:NAME} or {port:NAME[i]}"),
        ({"env": {"X": "{port:api[99999999999]}"}}, "service api runs 1 copy"),
        (
            {"replicas": {"api": 2}, "ready": {"api": "http://127.0.0.1:{port:api[2]}/"}},
            "--ready api: {port:api[2]}: service api runs 2 copies",
        ),
        (
            {"between": ["python", "fix.py", "{port:nope}"]},
            "--between: {port:nope}: no --serve service named 'nope'",
        ),
        (
            {"serve": ["api=python a.py", "web=python w.py --api {port:db}"]},
            "--serve web: {port:db}: no --serve service",
        ),
        (
            {"serve": ["$(touch x)=python a.py"]},
            "--serve $(touch x)=python a.py: command not found: $(touch (a service is NAME=CMD",
        ),
    ],
)
def test_a_placeholder_that_names_nothing_is_a_one_line_error(kw: dict[str, object], message: str) -> None:
    kw = {"serve": ["api=python a.py --port {port}"], **kw}
    with pytest.raises(UsageError) as err:
        topo(**kw)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_placeholder_mistake_names_the_option_as_the_caller_spelled_it() -> None:
    with pytest.raises(UsageError, match=r"^killdrill_env X: \{port:x\}"):
        topo(Spelling.INI, serve=["api=python a.py"], env={"X": "{port:x}"})
    with pytest.raises(UsageError, match=r"^env= X: \{port:x\}"):
        topo(Spelling.KEYWORD, serve=["api=python a.py"], env={"X": "{port:x}"})
