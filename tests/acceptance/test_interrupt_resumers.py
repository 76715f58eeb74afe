"""Consume-once under concurrent delivery: N resumers deliver one approval to a parked ``interrupt()``.

The drill kills the first attempt once the graph is parked at the interrupt (at
``before:deliver_approval``, before any delivery), then starts three resumers, each delivering the
same ``Command(resume="approved")``, lined up inside the gated node where each has read the parked
state (``before:refund``; with the claim, at the delivery's start, where the claims race).  The
agent as users write it resumes in every process that finds the interrupt and emails the customer
three times (caught: ``duplicate_effect`` on ``mailbox.send``); the agent that claims the interrupt with
one conditional UPDATE first resumes it once (passes).  On SqliteSaver and PostgresSaver, on real
processes (forked from a warm template).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from killdrill.drill import Drill, DrillOptions
from killdrill.records import CREATED, REPLAYED

AGENT = Path(__file__).parents[1] / "agents" / "basic" / "approval.py"
POINT = "before:deliver_approval"
GATED = "before:refund"  # the node that calls interrupt() and then refunds and emails
RESUMERS = 3


@pytest.fixture(params=["sqlite", "postgres"])
def saver(request: pytest.FixtureRequest) -> list[str]:
    """The checkpointer arguments of the agent: SqliteSaver in the workdir, or PostgresSaver."""
    if request.param == "sqlite":
        return ["--db", "{workdir}/ckpt.sqlite"]
    url: str = request.getfixturevalue("postgres_url")
    return ["--postgres", url]


def drill_verdicts(root: Path, saver: list[str], *, claim: bool, runs: int) -> list[tuple[str, ...]]:
    command = [sys.executable, str(AGENT), "--thread", "{thread}", *saver, *(["--claim"] if claim else [])]
    options = DrillOptions(
        root=root,
        integrations=("langgraph",),
        resumers=RESUMERS,
        # the claim races at the delivery's start; without it, the resumers race inside refund,
        # where each has read the parked checkpoint (held before invoke reads it, the first let
        # go could finish refund before another read the state, and find the run done)
        barrier=POINT if claim else GATED,
        launcher="fork",
        preload=("langgraph.graph", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres"),
        discovery_runs=1,
        workers=2,
        keep=True,
    )
    with Drill(command, options) as drill:
        result = drill.run_all([POINT] * runs)
    verdicts = []
    for case in result.cases:
        assert case.attempts[0].killed_at == POINT, case.attempts[0]
        resumers = case.attempts[1:]
        assert [a.number for a in resumers] == [2] * RESUMERS and all(a.returncode == 0 for a in resumers)
        # The ledger by hand: who refunded, who emailed, in which attempt.
        assert case.ledger is not None
        sends = [c for c in case.ledger.calls if (c.provider, c.op) == ("mailbox", "send")]
        charges = [c for c in case.ledger.calls if (c.provider, c.op) == ("payments", "charge")]
        assert {c.attempt for c in sends + charges} == {2}  # attempt 1 died parked: it delivered nothing
        if claim:
            assert len(sends) == 1 and [c.outcome for c in charges] == [CREATED]
        else:
            # Every resumer, held together inside refund with the parked state read, delivers it.
            assert len(sends) == RESUMERS and len({c.pid for c in sends}) == len(sends)
            assert sorted(c.outcome for c in charges) == [CREATED] + [REPLAYED] * (len(charges) - 1)
            assert len(charges) == len(sends)
        verdicts.append(case.kinds)
    return verdicts


def test_concurrent_resumers_fire_the_gated_effect_again(tmp_path: Path, saver: list[str]) -> None:
    assert drill_verdicts(tmp_path, saver, claim=False, runs=1) == [("duplicate_effect",)]


def test_single_update_claim_of_the_interrupt_passes(tmp_path: Path, saver: list[str]) -> None:
    assert drill_verdicts(tmp_path, saver, claim=True, runs=1) == [()]


@pytest.mark.slow
def test_verdicts_identical_over_20_runs(tmp_path: Path, saver: list[str]) -> None:
    started = time.monotonic()
    caught = drill_verdicts(tmp_path / "naive", saver, claim=False, runs=20)
    passed = drill_verdicts(tmp_path / "claim", saver, claim=True, runs=20)
    print(f"20+20 runs in {time.monotonic() - started:.1f}s")
    assert caught == [("duplicate_effect",)] * 20
    assert passed == [()] * 20
