"""The example agent that charges through the real ``stripe`` SDK, drilled against the HTTP fakes.

The SDK's automatic Idempotency-Key is generated per call, so a resumed process sends a new
one and the customer is charged twice; an explicit key derived from the charge replays.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.records import Call, CaseResult

# Found, not imported: the agents import them in their own processes (the SDKs take seconds to
# import, and every xdist worker collects this module).
_missing = [m for m in ("stripe",) if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(f"needs {', '.join(_missing)}", allow_module_level=True)

AGENT = ["python", "-m", "killdrill.examples.stripe_agent", "--thread", "{thread}"]
AGENT += ["--state", "{workdir}/agent-state.json"]


def drill(tmp_path: Path, *extra: str, launcher: str = "spawn") -> Drill:
    preload = ("stripe",) if launcher == "fork" else ()  # a fork template imports the SDK once
    options = DrillOptions(
        root=tmp_path, http_fakes=True, timeout=60, discovery_runs=1, launcher=launcher, preload=preload
    )
    return Drill([*AGENT, *extra], options)


def charges(result: CaseResult) -> list[Call]:
    assert result.ledger is not None, result.text()
    return [c for c in result.ledger.calls if (c.provider, c.op) == ("payments", "charge")]


def test_sdk_automatic_key_double_charges_after_a_kill(tmp_path: Path) -> None:
    d = drill(tmp_path, "--auto-key")
    assert d.points()[:3] == ["before:charge_customer", "during:payments.charge", "after:charge_customer"]
    for point in ("during:payments.charge", "after:charge_customer"):
        result = d.run_case(point)
        assert "duplicate_effect" in result.kinds, result.text()
        assert len({c.key for c in charges(result)}) == 2, result.text()  # a fresh SDK key per process


def test_explicit_stable_key_replays_after_a_kill(tmp_path: Path) -> None:
    # forked attempts: the auto-key catch above spawns fresh SDK processes
    with drill(tmp_path, launcher="fork") as d:
        for point in ("during:payments.charge", "after:charge_customer", "before:save_state"):
            result = d.run_case(point)
            assert result.ok, result.text()
            assert [c.outcome for c in charges(result)] == ["created", "replayed"], result.text()
