"""The deployment's processes: names, replicas, ports kept per case, placeholders, mistakes."""

from __future__ import annotations

import pytest

from killdrill.drill.topology import Topology
from killdrill.errors import UsageError
from killdrill.options import DrillOptions, OptionError
from killdrill.points import ScheduleError, parse_fault


def topo(**kw: object) -> Topology:
    return Topology(DrillOptions(**kw), ["python", "client.py", "--url", "http://127.0.0.1:{port}/{thread}"])  # type: ignore[arg-type]


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
