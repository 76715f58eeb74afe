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
        ("restart=nope:worker:after:charge", SERVED, "no --serve service 'nope' (services: redis, worker)"),
        ("restart=redis:after:charge", DrillOptions(), "a --serve service; this drill has none"),
        ("cut=pg:after:charge", PROXIED, None),
        ("rst=db:after:charge", PROXIED, "no --proxy named 'db' (proxies: pg)"),
        ("cut=pg:after:charge", DrillOptions(), "no --proxy named 'pg' (proxies: none)"),
    ],
)
def test_a_target_naming_nothing_is_one_line(schedule: str, options: DrillOptions, why: str | None) -> None:
    if why is None:
        check_schedule(parse_schedule(schedule), options)
        return
    with pytest.raises(UsageError, match=why.replace("(", r"\(").replace(")", r"\)")):
        check_schedule(parse_schedule(schedule), options)
