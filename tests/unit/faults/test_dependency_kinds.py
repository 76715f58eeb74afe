"""The dependency fault kinds as the grammar and the drill's options see them: ``restart=`` and
``cut=``/``rst=`` parse with their target apart from their trigger, print back as written, and a
target naming nothing is one line before any run."""

from __future__ import annotations

import pytest

from killdrill.errors import UsageError
from killdrill.faults.kinds import check_schedule
from killdrill.options import DrillOptions
from killdrill.points import parse_fault, parse_schedule

SERVED = DrillOptions(serve={"redis": ["redis-server"], "worker": ["python", "w.py"]})
TEMPORAL = DrillOptions(integrations=("temporal",), serve={"worker": ["python", "w.py"]})
PROXIED = DrillOptions(proxy={"pg": "postgres://127.0.0.1:5432"})


@pytest.mark.parametrize(
    ("text", "kind", "target", "process", "point"),
    [
        ("restart=redis:worker:after:charge", "restart", "redis", "worker", "after:charge"),
        ("restart=redis:offset:2000ms", "restart", "redis", None, None),
        ("cut=pg:during:pg.commit#2", "cut", "pg", None, "during:pg.commit"),
        ("rst=pg:worker[1]:before:ship", "rst", "pg", "worker[1]", "before:ship"),
    ],
)
def test_target_and_trigger_are_named_apart(
    text: str, kind: str, target: str, process: str | None, point: str | None
) -> None:
    fault = parse_fault(text)
    assert (fault.acts, fault.target, fault.process, fault.point) == (kind, target, process, point)
    assert str(fault) == text
    assert not fault.is_kill  # the process that reaches the trigger goes on


@pytest.mark.parametrize(
    ("schedule", "options", "why"),
    [
        ("restart=redis:worker:after:charge", SERVED, None),
        (
            "restart=nope:worker:after:charge",
            SERVED,
            "no --serve service or integration's service 'nope' (services: --serve redis, worker)",
        ),
        ("restart=redis:after:charge", DrillOptions(), "an integration's service; this drill has none"),
        ("restart=temporal:worker:during:payments.charge", TEMPORAL, None),  # the runtime's server
        ("restart=temporal:after:charge", DrillOptions(integrations=("temporal",)), None),
        (
            "restart=temporl:worker:after:charge",
            TEMPORAL,
            "'temporl' (services: --serve worker; integrations' temporal)",
        ),
        ("cut=pg:after:charge", PROXIED, None),
        ("rst=db:after:charge", PROXIED, "no --proxy named 'db' (proxies: pg)"),
        ("cut=pg:after:charge", DrillOptions(), "no --proxy named 'pg' (proxies: none)"),
        ("stall=pg~2s:after:charge", PROXIED, None),
        ("stall=pg~0s:after:charge", PROXIED, "a stall lasts more than 0 and at most 3600 s"),
        ("cut=pg~2s:after:charge", PROXIED, "expected cut=PROXY"),
    ],
)
def test_a_target_naming_nothing_is_one_line(schedule: str, options: DrillOptions, why: str | None) -> None:
    if why is None:
        check_schedule(parse_schedule(schedule), options)
        return
    with pytest.raises(UsageError, match=why.replace("(", r"\(").replace(")", r"\)")):
        check_schedule(parse_schedule(schedule), options)


class _Catalogue:
    """What the draw reads of a discovery: its labels."""

    def __init__(self, *labels: str) -> None:
        self._labels = list(labels)

    def labels(self) -> list[str]:
        return self._labels


def test_chaos_draws_a_dependency_fault_one_run_in_two_triggered_elsewhere() -> None:
    from killdrill.faults.network import with_dependency_fault

    catalogue = _Catalogue("worker:before:charge", "redis:before:noise", "driver:after:submit")
    drawn = [
        with_dependency_fault(parse_schedule("before:x"), catalogue, 7, i, ["redis"], ["pg"])  # type: ignore[arg-type]
        for i in range(40)
    ]
    firsts = [str(s.faults[0]) for s in drawn if len(s) == 2]
    assert 10 < len(firsts) < 30  # about one run in two
    assert all(f.split("=", 1)[0] in ("restart", "cut", "rst") for f in firsts)
    assert not any(f.startswith("restart=redis:redis:") for f in firsts)  # never its own point
    again = with_dependency_fault(parse_schedule("before:x"), catalogue, 7, 3, ["redis"], ["pg"])  # type: ignore[arg-type]
    assert again == drawn[3]  # the seed and the run's index decide
    assert with_dependency_fault(parse_schedule("before:x"), catalogue, 7, 3, [], []) == parse_schedule(
        "before:x"
    )


def test_chaos_may_restart_an_integrations_service_that_offers_restart() -> None:
    """``--faults deps`` draws a ``restart=`` of the ``--serve`` services and of the integrations'
    services the drill runs that can be restarted (the Temporal dev server), not of the others."""
    from killdrill.faults.network import restartable

    class Server:
        plugin = "temporal"

        def restart(self) -> None:
            return None

    class Broker:
        plugin = "celery"
        restart = None  # a ReportedService whose service offers none

    assert restartable(SERVED, [Server(), Broker()]) == ["redis", "worker", "temporal"]
    assert restartable(DrillOptions(), [Broker()]) == []
