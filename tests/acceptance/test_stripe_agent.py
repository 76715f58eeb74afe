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


# ---- refunds of a payment made before the drill (--existing) --------------------------------------

EXISTING = '[[stripe.payment_intents]]\nid = "pi_refundable_1"\namount = 10000\ncurrency = "usd"\n'
RETURNS = str(Path(__file__).parents[1] / "agents" / "wire" / "partial_refunds.py")


def existing(tmp_path: Path) -> str:
    path = tmp_path / "existing.toml"
    path.write_text(EXISTING)
    return str(path)


def returns_drill(tmp_path: Path, *extra: str, launcher: str = "spawn") -> Drill:
    options = DrillOptions(
        root=tmp_path / "runs",
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
        launcher=launcher,
        preload=("stripe",) if launcher == "fork" else (),
        existing=existing(tmp_path),
    )
    command = ["python", RETURNS, "--return-id", "ret-{thread}", "--payment-intent", "pi_refundable_1"]
    return Drill([*command, *extra], options)


def refunds(result: CaseResult) -> list[Call]:
    assert result.ledger is not None, result.text()
    return [c for c in result.ledger.calls if (c.provider, c.op) == ("payments", "refund")]


def test_partial_refunds_of_an_existing_payment_pass_every_point(tmp_path: Path) -> None:
    with returns_drill(tmp_path, launcher="fork") as d:
        assert d.points() == ["during:payments.refund", "during:payments.refund#2"]
        result = d.run_all()
        assert result.ok, result.text()
        for case in result.cases:  # the existing payment is state, never an effect of the agent
            assert {c.op for c in case.ledger.calls} == {"refund"}, case.text()  # type: ignore[union-attr]
            assert [c.payload["amount"] for c in refunds(case) if c.outcome == "created"] == [2500, 500]


def test_a_fresh_key_per_run_refunds_the_existing_payment_twice(tmp_path: Path) -> None:
    with returns_drill(tmp_path, "--bug", "key-per-run") as d:
        result = d.run_case("during:payments.refund#2")
        assert "duplicate_effect" in result.kinds, result.text()
        # the resumed process refunds both lines again: 6,000 of the 10,000, all accepted
        assert [c.outcome for c in refunds(result)].count("created") == 4, result.text()


@pytest.mark.slow
def test_the_refund_service_as_deployed_with_the_existing_payment(tmp_path: Path) -> None:
    pytest.importorskip("dbos")
    from tests.cli_support import run_cli

    app = "app=python -m killdrill.examples.refund_dbos --port {port} --workdir {workdir}"
    client = ["python", "-m", "killdrill.examples.refund_client", "--url", "http://127.0.0.1:{port}"]
    client += ["--refund", "{thread}", "--payment-intent", "pi_refundable_1", "--amount", "2500"]
    common = ["--integration", "dbos", "--http-fakes", "--existing", existing(tmp_path), "--timeout", "120"]
    out = run_cli(tmp_path, "drill", "--root", str(tmp_path / "ok"), *common, "--serve", app, "--", *client)
    assert out.returncode == 0, out.stdout + out.stderr  # a correct single refund: exactly-once everywhere
    assert "app:during:payments.refund" in out.stdout, out.stdout
    buggy = [*common, "--serve", app + " --bug new_workflow", "--", *client]
    out = run_cli(
        tmp_path, "run", "--root", str(tmp_path / "bug"), "-s", "app:during:payments.refund", *buggy
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "duplicate_effect: payments.refund" in out.stdout, out.stdout


def test_the_pytest_marker_reads_the_same_existing_objects(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\nkilldrill_discovery_runs = 1\nkilldrill_timeout = 60\n")
    agent = ["python", RETURNS, "--return-id", "ret-{thread}", "--payment-intent", "pi_refundable_1"]
    pytester.makepyfile(
        test_returns=f"""
        import pytest
        AGENT = {agent!r}

        @pytest.mark.killdrill(discover=AGENT, http_fakes=True, existing={existing(tmp_path)!r})
        def test_refunds(killdrill, kill_point):
            killdrill.run(AGENT, kill_point).assert_exactly_once()
        """
    )
    pytester.runpytest().assert_outcomes(passed=2)  # both refunds, the existing payment in every run


def razorpay_drill(tmp_path: Path, *extra: str) -> Drill:
    """The returns agent refunding a captured Razorpay payment declared before the drill."""
    if importlib.util.find_spec("razorpay") is None:
        pytest.skip("needs razorpay")
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "existing.toml"
    path.write_text('[[razorpay.payments]]\nid = "pay_order_7"\namount = 10000\n')
    options = DrillOptions(
        root=tmp_path / "runs",
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
        launcher="fork",
        preload=("razorpay",),
        existing=str(path),
    )
    return Drill(
        ["python", RETURNS, "--return-id", "ret-{thread}", "--razorpay", "pay_order_7", *extra], options
    )


def test_razorpay_partial_refunds_keyed_by_the_return_pass_every_point_and_a_fresh_key_is_caught(
    tmp_path: Path,
) -> None:
    with razorpay_drill(tmp_path) as d:
        assert d.points() == ["during:razorpay.refund", "during:razorpay.refund#2"]
        result = d.run_all()
        assert result.ok, result.text()
    with razorpay_drill(tmp_path / "bug", "--bug", "key-per-run") as d:
        caught = d.run_case("during:razorpay.refund#2")
        assert "duplicate_effect" in caught.kinds, caught.text()


SESSION_AGENT = """
import os, sys, uuid
import stripe

client = stripe.StripeClient("sk_test_x", base_addresses={"api": os.environ["KILLDRILL_FAKES_URL"]})
order = sys.argv[1]
key = f"pay-link-{order}" if "--bug" not in sys.argv else uuid.uuid4().hex  # the bug: a key per run
session = client.v1.checkout.sessions.create(
    params={
        "mode": "payment",
        "client_reference_id": order,
        "line_items": [
            {"price_data": {"currency": "eur", "unit_amount": 4200, "product_data": {"name": "Order"}}}
        ],
    },
    options={"idempotency_key": key},
)
print("send the customer", session.url)
"""


def test_a_checkout_session_keyed_by_the_order_is_sent_once_and_a_key_per_run_twice(tmp_path: Path) -> None:
    agent = tmp_path / "pay_link.py"
    agent.write_text(SESSION_AGENT)
    options = DrillOptions(
        root=tmp_path / "runs",
        http_fakes=True,
        timeout=60,
        discovery_runs=1,
        launcher="fork",
        preload=("stripe",),
    )
    with Drill(["python", str(agent), "order-{thread}"], options) as d:
        assert d.points() == ["during:payments.create_checkout_session"]
        assert d.run_all().ok
    with Drill(["python", str(agent), "order-{thread}", "--bug"], options) as d:
        caught = d.run_case("during:payments.create_checkout_session")
        assert "duplicate_effect" in caught.kinds, caught.text()
