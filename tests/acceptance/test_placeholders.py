"""Placeholders where the docs promise them, and the option mistakes around them, on every route:
``{thread}``/``{workdir}`` in ``--env`` values without services reach the agent filled, a
``--ready`` probe's ``{port}`` is the service's port, and a placeholder, service name or option
that names nothing is a one-line usage error (exit 2) from ``run``, ``drill``, ``chaos`` and
the Python API (the pytest marker's), before any process starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from killdrill.drill import Drill
from killdrill.errors import UsageError
from tests.acceptance.test_deployments import CLIENT, SHOP
from tests.cli_support import STEPS, run_cli
from tests.leftovers import survivors

ECHO = (
    "import os, killdrill\n"
    "with killdrill.node('x'):\n"
    "    open(os.path.join(os.environ['KILLDRILL_WORKDIR'], 'env.txt'), 'w').write(os.environ['DB'])\n"
)


def test_env_values_without_services_get_thread_and_workdir(tmp_path: Path) -> None:
    agent = tmp_path / "echo.py"
    agent.write_text(ECHO)
    root = tmp_path / "w"
    out = run_cli(
        tmp_path, "run", "--schedule", "before:x", "--discovery-runs", "1", "--keep", "--root", str(root),
        "--env", "DB=sqlite:///{workdir}/db?thread={thread}", "--", "python", str(agent), "{workdir}",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (case,) = [p for p in root.iterdir() if "before_x" in p.name]
    written = (case / "env.txt").read_text()
    assert written.startswith(f"sqlite:///{case}/db?thread=") and "{" not in written


def test_env_values_through_the_python_api_are_filled_too(tmp_path: Path) -> None:
    agent = tmp_path / "echo.py"
    agent.write_text(ECHO)
    drill = Drill(
        ["python", str(agent), "{workdir}"],
        root=tmp_path / "w",
        keep=True,
        discovery_runs=1,
        env={"DB": "{workdir}|{thread}"},
    )
    try:
        result = drill.run_case("before:x")
        workdir = Path(result.workdir)
        assert (workdir / "env.txt").read_text() == f"{workdir}|{result.thread}"
    finally:
        drill.close()


def test_a_ready_probe_with_port_is_the_services_port(tmp_path: Path) -> None:
    root = tmp_path / "w"
    out = run_cli(
        tmp_path, "run", "--schedule", "api:during:payments.charge", "--discovery-runs", "1",
        "--root", str(root),
        "--serve", SHOP, "--ready", "api=tcp:{port}", "--", *CLIENT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert not survivors(str(root), seconds=0.3)


SERVED = ["--serve", SHOP]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [*SERVED, "--env", "X={port:missing}"],
            "--env X: {port:missing}: no --serve service named 'missing'",
        ),
        ([*SERVED, "--env", "X={port:api[5]}"], "--env X: {port:api[5]}: service api runs 1 copy"),
        (
            [*SERVED, "--env", "X={port:api[-1]}"],
            "--env X: {port:api[-1]}: expected {port:NAME} or {port:NAME[i]}",
        ),
        ([*SERVED, "--replicas", "api=2", "--env", "X={port:api[999999]}"], "service api runs 2 copies"),
        ([*SERVED, "--serve", SHOP.replace("shop.py", "other.py")], "--serve: service 'api' is given twice"),
        (["--replicas", "api=2"], "--replicas copies services: it needs --serve;"),
        (["--restart-delay", "1"], "--restart-delay delays a killed service's restart: it needs --serve;"),
        (["--ready", "api=tcp:1"], "--ready says when a service is ready: it needs --serve;"),
        (["--serve", "サービス=python x.py"], "--serve: 'サービス' is not a service name"),
        (
            ["--serve", "$(touch x)=python x.py"],
            "--serve $(touch x)=python x.py: command not found: $(touch (a service is NAME=CMD",
        ),
        ([*SERVED, "--replicas", "api=1000000"], "--replicas: 'api=1000000': at most 64 copies of a service"),
        (["--env", "X={port}"], "--env X: {port} is the first service's port: it needs a --serve service"),
        (["--env", "X=w{replica}"], "--env X: {replica} is a service's copy number: it needs --serve"),
    ],
)
@pytest.mark.parametrize("command", ["run", "drill", "chaos"])
def test_a_mistake_is_one_usage_line_before_anything_runs(
    tmp_path: Path, command: str, args: list[str], message: str
) -> None:
    schedule = ["--schedule", "before:x"] if command == "run" else []
    started = time.monotonic()
    out = run_cli(tmp_path, command, *schedule, "--root", str(tmp_path / "w"), *args, "--", *STEPS)
    took = time.monotonic() - started
    lines = out.stderr.strip().splitlines()  # chaos says its seed first
    assert out.returncode == 2 and [ln for ln in lines if "error" in ln] == lines[-1:], (
        out.stdout + out.stderr
    )
    assert message in lines[-1], lines[-1]
    assert took < 30 and not (tmp_path / "x").exists()  # no shell ran $(touch x); nothing was started
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


def test_a_command_placeholder_without_services_is_refused(tmp_path: Path) -> None:
    out = run_cli(tmp_path, "drill", "--", "python", "agent.py", "--port", "{port}")
    assert out.returncode == 2 and "the command: {port} is the first service's port" in out.stderr
    with pytest.raises(UsageError, match=r"^env= X: \{port:db\}: no serve= service named 'db'"):
        Drill(STEPS, serve={"api": SHOP.split("=", 1)[1]}, env={"X": "{port:db}"})


@pytest.mark.parametrize("points", [";;;", "before:x;", " ; "])
def test_empty_points_are_refused(tmp_path: Path, points: str) -> None:
    out = run_cli(tmp_path, "drill", "--points", points, "--", *STEPS)
    assert out.returncode == 2 and "an empty schedule between ';'" in out.stderr, out.stderr
    assert "case(s)" not in out.stderr  # refused before discovery


def test_the_marker_route_fills_env_and_names_mistakes_as_keywords(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 30\n")
    agent = pytester.path / "echo.py"
    agent.write_text(ECHO + "open(os.path.join(os.environ['KILLDRILL_WORKDIR'], 'seen'), 'w').write('1')\n")
    pytester.makepyfile(
        test_inner=f"""
        import os, pytest
        AGENT = ["python", {str(agent)!r}, "{{workdir}}"]

        @pytest.mark.killdrill(points=["before:x"], env={{"DB": "{{workdir}}/db"}}, keep=True)
        def test_filled(killdrill, kill_point):
            result = killdrill.run(AGENT, kill_point)
            result.assert_exactly_once()
            assert open(os.path.join(result.workdir, "env.txt")).read() == str(result.workdir) + "/db"

        @pytest.mark.killdrill(points=["before:x"], replicas={{"api": 2}})
        def test_replicas_alone(killdrill, kill_point):
            killdrill.run(AGENT, kill_point)

        @pytest.mark.killdrill(points=["before:x"], env={{"X": "{{port}}"}})
        def test_port_alone(killdrill, kill_point):
            killdrill.run(AGENT, kill_point)

        @pytest.mark.killdrill(points=[""])
        def test_empty_point(killdrill, kill_point):
            killdrill.run(AGENT, kill_point)
        """
    )
    res = pytester.runpytest("-rfE")
    out = res.stdout.str()
    assert "test_filled[before:x] PASSED" in pytester.runpytest("-v", "-k", "filled").stdout.str()
    assert "replicas= copies services: it needs serve=" in out, out
    assert "env= X: {port} is the first service's port: it needs a serve= service" in out, out
    assert "an empty schedule (write 'none' for a case without a kill)" in out, out
    assert "Traceback" not in out
