"""A Celery task that charges over HTTP with ``requests`` records the delivery that made the
call (the task, the broker's redelivered flag, the worker), as one made in process: a
redelivered unkeyed charge names both deliveries."""

from __future__ import annotations

from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from tests.acceptance.test_celery import REDIS, broker
from tests.frameworks import need

need("celery", "celery", "redis")
pytest.importorskip("requests")

AGENT = str(Path(__file__).parents[1] / "agents" / "wire" / "charge_celery.py")


def test_a_redelivered_charge_over_http_names_its_deliveries(tmp_path: Path) -> None:
    options = DrillOptions(
        root=tmp_path,
        integrations=("celery",),
        integration_options={"broker": broker(REDIS)},
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
    )
    command = ["python", AGENT, "--thread", "{thread}", "--workdir", "{workdir}", "--bug", "unkeyed"]
    with Drill(command, options) as d:
        case = d.run_case("after:charge")
    (dup,) = [v for v in case.violations if v.kind == "duplicate_effect"]
    contexts = [c.get("context") or {} for c in dup.detail["calls"]]
    assert [c.get("redelivered") for c in contexts] == [False, True], case.text()
    assert {c.get("name") for c in contexts} == {"charge"} and {c.get("runtime") for c in contexts} == {
        "celery"
    }
    assert "landed by celery task charge" in dup.message, case.text()
