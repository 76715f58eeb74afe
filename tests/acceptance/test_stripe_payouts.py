"""A payout agent through the real ``stripe`` SDK, drilled against the HTTP fakes: a transfer to
a seller's connected account (declared with ``--existing``) and a payout, each keyed by the order,
land once at every point; a fresh key per run pays the seller twice, caught as a duplicate."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.records import CaseResult

if importlib.util.find_spec("stripe") is None:
    pytest.skip("needs stripe", allow_module_level=True)

AGENT = str(Path(__file__).parents[1] / "agents" / "wire" / "seller_payout.py")


def drill(tmp_path: Path, *extra: str) -> Drill:
    existing = tmp_path / "existing.toml"
    existing.write_text('[[stripe.accounts]]\nid = "acct_seller_7"\n')
    options = DrillOptions(
        root=tmp_path / "runs",
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
        launcher="fork",
        preload=("stripe",),
        existing=str(existing),
    )
    return Drill(["python", AGENT, "--order", "order-{thread}", "--seller", "acct_seller_7", *extra], options)


def landed(result: CaseResult, op: str) -> int:
    assert result.ledger is not None, result.text()
    return sum(1 for c in result.ledger.calls if (c.op, c.outcome) == (op, "created"))


def test_a_payout_agent_keyed_by_the_order_pays_once_at_every_point(tmp_path: Path) -> None:
    with drill(tmp_path) as d:
        assert d.points() == ["during:payments.transfer", "during:payments.payout"]
        result = d.run_all()
        assert result.ok, result.text()
        for case in result.cases:
            assert (landed(case, "transfer"), landed(case, "payout")) == (1, 1), case.text()


def test_a_fresh_key_per_run_pays_the_seller_twice(tmp_path: Path) -> None:
    with drill(tmp_path, "--bug", "key-per-run") as d:
        caught = d.run_case("during:payments.transfer")
        assert "duplicate_effect" in caught.kinds, caught.text()
        assert landed(caught, "transfer") == 2, caught.text()
