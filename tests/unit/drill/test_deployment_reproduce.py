"""A deployed case's reproduction line carries every option the case was run with: read back by
the command line, it gives the same options (services, probes, replicas, start order, restart delay, env,
passed variables, an integration's own option)."""

from __future__ import annotations

import shlex

from killdrill.cli.commands import _split_command, build_parser, drill_options
from killdrill.integrations import option_rows
from killdrill.options import DrillOptions
from killdrill.options.reproduce import reproduce_line


def test_the_reproduction_line_of_a_deployment_reads_back_as_its_options() -> None:
    options = DrillOptions(
        serve={"app": "python -m uvicorn app:app --port {port}", "worker": "python -m w --name w{replica}"},
        ready={"app": "http://127.0.0.1:{port}/health", "worker": "log:worker ready"},
        replicas={"worker": 2},
        after={"worker": ("app",)},
        restart_delay=1.5,
        env={"DB_URL": "sqlite:///{workdir}/db", "STRIPE_API_BASE": "{KILLDRILL_FAKES_URL}"},
        pass_env=("STRIPE_KEY",),
        http_fakes=True,
        smtp_fake=True,
        integrations=("celery",),
        integration_options={"broker": "rabbitmq"},
        timeout=90.0,
        grace=2.0,
        max_attempts=4,
        discovery_runs=1,
    )
    command = ["python", "client.py", "--url", "http://127.0.0.1:{port}"]
    line = reproduce_line(command, options, "app:before:x", option_rows(options.integrations))
    own, again_command = _split_command(shlex.split(line)[1:])
    args = build_parser().parse_args(own)
    assert again_command == command
    assert args.schedule == "app:before:x"
    again = drill_options(args)
    fields = (
        "serve",
        "ready",
        "replicas",
        "after",
        "restart_delay",
        "env",
        "pass_env",
        "http_fakes",
        "smtp_fake",
    )
    fields += ("integrations", "integration_options", "timeout", "grace", "max_attempts", "discovery_runs")
    for field in fields:
        assert getattr(again, field) == getattr(options, field), field


def test_a_deployments_power_loss_reads_back_with_its_named_folders() -> None:
    options = DrillOptions(
        serve={"app": "python app.py --port {port} --records /srv/orders/{thread}.json"},
        power_loss_paths=("/srv/orders",),
        restart_delay=0.5,
    )
    command = ["python", "client.py", "--url", "http://127.0.0.1:{port}"]
    line = reproduce_line(command, options, "powerloss:app:during:payments.charge", ())
    own, again_command = _split_command(shlex.split(line)[1:])
    args = build_parser().parse_args(own)
    assert again_command == command and args.schedule == "powerloss:app:during:payments.charge"
    again = drill_options(args)
    for field in ("serve", "power_loss_paths", "restart_delay"):
        assert getattr(again, field) == getattr(options, field), field
