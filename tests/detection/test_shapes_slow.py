"""The non-deterministic shapes drilled 20 times: 0 false alarms, every planted bug caught with its kind.

    pytest -m slow tests/detection/test_shapes_slow.py -n 2 -s

Correct agents: 20 drills each.  A plain-Python agent's drill is every catalogue point; a
LangGraph agent's is every point around its effects (``during:``, ``after:NODE``,
``committed:NODE``; the checkpointer's own points are left to the nightly table for time).
Planted bugs: their catch point, 20 times.  Every case's ledger verdict is strict here: a
point the clean run reached and the case did not is an alarm too.  The fast 1x version is
``test_detection.py`` (each catch point once).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from tests.detection.corpus import SHAPE_CORRECT, SHAPE_DEFECTS, Agent, langgraph_available
from tests.detection.run import catches

DRILLS = int(os.environ.get("KILLDRILL_SHAPE_DRILLS", "20"))
pytestmark = pytest.mark.slow


def _drill(agent: Agent, root: Path) -> Drill:
    return Drill(agent.command, DrillOptions(root=root, launcher="fork", workers=2, **agent.options))


def _points(agent: Agent, drill: Drill) -> list[str]:
    labels = drill.points()
    if "langgraph" not in agent.options.get("integrations", ()):
        return labels
    return [
        lb
        for lb in labels
        if lb.startswith("during:")
        or (not lb.split("#")[0].endswith(":checkpoint") and not lb.startswith("before:"))
    ]


def _record(name: str, data: dict) -> None:
    out = os.environ.get("KILLDRILL_SHAPE_REPORT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"agent": name, **data}) + "\n")


def _needs_langgraph(agent: Agent) -> None:
    if "langgraph" in agent.options.get("integrations", ()) and not langgraph_available():
        pytest.skip("langgraph is not installed")


@pytest.mark.parametrize("agent", [pytest.param(a, id=a.name) for a in SHAPE_CORRECT])
def test_correct_shape_never_alarms(agent: Agent, tmp_path: Path) -> None:
    _needs_langgraph(agent)
    t0 = time.monotonic()
    with _drill(agent, tmp_path) as drill:
        points = _points(agent, drill)
        alarms: list[str] = []
        cases = 0
        for _ in range(DRILLS):
            result = drill.run_all(points)
            cases += len(result.cases)
            alarms += [f"{c.schedule}: {c.kinds} {c.workdir}" for c in result.cases if not c.ok]
        mode = drill.discover().mode
    # every drill ran every point: an empty catalogue or a skipped case must not read as "no alarm"
    assert points and cases == DRILLS * len(points), (DRILLS, len(points), cases)
    _record(
        agent.name,
        {
            "drills": DRILLS,
            "cases": cases,
            "points": len(points),
            "alarms": len(alarms),
            "mode": mode,
            "seconds": round(time.monotonic() - t0),
        },
    )
    assert not alarms, "\n".join(alarms)


@pytest.mark.parametrize("agent", [pytest.param(a, id=a.name) for a in SHAPE_DEFECTS])
def test_planted_bug_is_caught_every_time(agent: Agent, tmp_path: Path) -> None:
    _needs_langgraph(agent)
    t0 = time.monotonic()
    with _drill(agent, tmp_path) as drill:
        drill.discover()
        with ThreadPoolExecutor(2) as pool:
            cases = list(pool.map(lambda _: drill.run_case(agent.catch[0]), range(DRILLS)))
    assert len(cases) == DRILLS
    missed = [
        f"{c.kinds} killed at {c.attempts[0].killed_at if c.attempts else None} {c.workdir}"
        for c in cases
        if not (c.attempts and c.attempts[0].killed_at == agent.catch[0] and catches(agent, c))
    ]
    _record(
        agent.name,
        {
            "drills": DRILLS,
            "point": agent.catch[0],
            "caught": DRILLS - len(missed),
            "kinds": sorted({k for c in cases for k in c.kinds}),
            "seconds": round(time.monotonic() - t0),
        },
    )
    assert not missed, "\n".join(missed)
