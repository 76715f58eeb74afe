"""Stripe's stateful rules the fake keeps (refunds, PaymentIntents' steps, customers) and the
bodies it refuses, one test each, through the real ``stripe`` SDK; the objects an agent expects
to find come from an existing-objects file (``--existing``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

stripe = pytest.importorskip("stripe")
httpx = pytest.importorskip("httpx")

from killdrill.errors import UsageError  # noqa: E402
from killdrill.fakes.existing import load_existing  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes  # noqa: E402

EXISTING = """
[[stripe.payment_intents]]
id = "pi_refundable_1"
amount = 10000
currency = "usd"

[[stripe.payment_intents]]
id = "pi_authorized_1"
amount = 3000
currency = "eur"
status = "requires_capture"

[[stripe.customers]]
id = "cus_ana"
email = "ana@example.com"
"""


@pytest.fixture
def srv(ledger_file: str, tmp_path: Path) -> Iterator[FakesServer]:
    path = tmp_path / "existing.toml"
    path.write_text(EXISTING)
    load_existing(str(path)).plant(Ledger(ledger_file, THREAD))
    with FakesServer(ledger_file, thread=THREAD) as server:
        yield server


@pytest.fixture
def sdk(srv: FakesServer) -> stripe.StripeClient:
    return stripe.StripeClient("sk_test_x", base_addresses={"api": srv.url}, max_network_retries=0)


def refund(sdk: stripe.StripeClient, key: str, **params: object) -> stripe.Refund:
    return sdk.v1.refunds.create(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]


def test_partial_refunds_until_the_amount_is_used_up(sdk: stripe.StripeClient, ledger_file: str) -> None:
    first = refund(sdk, "r1", payment_intent="pi_refundable_1", amount=2500)
    assert (first.object, first.amount, first.charge, first.status) == (
        "refund",
        2500,
        "ch_refundable_1",
        "succeeded",
    )
    charge = sdk.v1.charges.retrieve("ch_refundable_1")
    assert (charge.amount_refunded, charge.refunded) == (2500, False)
    assert refund(sdk, "r2", charge="ch_refundable_1", amount=2500).amount == 2500  # by charge too
    assert refund(sdk, "r3", payment_intent="pi_refundable_1").amount == 5000  # no amount: what is left
    intent = sdk.v1.payment_intents.retrieve("pi_refundable_1", params={"expand": ["latest_charge"]})
    assert (intent.latest_charge.amount_refunded, intent.latest_charge.refunded) == (10000, True)
    with pytest.raises(stripe.InvalidRequestError) as info:
        refund(sdk, "r4", payment_intent="pi_refundable_1", amount=1)
    assert info.value.http_status == 400 and info.value.code == "charge_already_refunded"
    assert outcomes(ledger_file, "payments") == ["created", "created", "created", "rejected"]


def test_a_refund_larger_than_what_is_left_is_amount_too_large(sdk: stripe.StripeClient) -> None:
    refund(sdk, "r1", payment_intent="pi_refundable_1", amount=9000)
    with pytest.raises(stripe.InvalidRequestError) as info:
        refund(sdk, "r2", payment_intent="pi_refundable_1", amount=1001)
    err = info.value.json_body["error"]
    assert info.value.http_status == 400 and (err["type"], err["code"], err["param"]) == (
        "invalid_request_error",
        "amount_too_large",
        "amount",
    )
    assert refund(sdk, "r3", payment_intent="pi_refundable_1", amount=1000).amount == 1000


def test_a_refund_replays_under_its_key_and_two_keys_refund_twice(sdk: stripe.StripeClient) -> None:
    a = refund(sdk, "wf-1", payment_intent="pi_refundable_1", amount=2500)
    assert refund(sdk, "wf-1", payment_intent="pi_refundable_1", amount=2500).id == a.id
    assert refund(sdk, "wf-2", payment_intent="pi_refundable_1", amount=2500).id != a.id  # Stripe does too
    assert sdk.v1.charges.retrieve("ch_refundable_1").amount_refunded == 5000


def test_no_such_payment_intent_is_resource_missing(sdk: stripe.StripeClient) -> None:
    with pytest.raises(stripe.InvalidRequestError) as info:
        refund(sdk, "r1", payment_intent="pi_nope")
    assert info.value.code == "resource_missing"


def test_a_manual_capture_intent_captures_once_then_refunds(sdk: stripe.StripeClient) -> None:
    intent = sdk.v1.payment_intents.retrieve("pi_authorized_1")
    assert (intent.status, intent.amount_capturable) == ("requires_capture", 3000)
    with pytest.raises(stripe.InvalidRequestError):  # not captured: nothing to refund yet
        refund(sdk, "r0", payment_intent="pi_authorized_1")
    captured = sdk.v1.payment_intents.capture("pi_authorized_1", params={"amount_to_capture": 2000})
    assert (captured.status, captured.amount_received) == ("succeeded", 2000)
    with pytest.raises(stripe.InvalidRequestError) as info:
        sdk.v1.payment_intents.capture("pi_authorized_1")
    assert info.value.code == "payment_intent_unexpected_state"
    with pytest.raises(stripe.InvalidRequestError) as too_much:
        refund(sdk, "r1", payment_intent="pi_authorized_1", amount=2001)  # only 2000 was captured
    assert too_much.value.code == "amount_too_large"


def test_cancel_before_success_and_not_after(sdk: stripe.StripeClient) -> None:
    made = sdk.v1.payment_intents.create(
        params={"amount": 500, "currency": "usd", "capture_method": "manual"},
        options={"idempotency_key": "a"},
    )
    assert made.status == "requires_capture"
    canceled = sdk.v1.payment_intents.cancel(made.id, params={"cancellation_reason": "abandoned"})
    assert (canceled.status, canceled.cancellation_reason) == ("canceled", "abandoned")
    with pytest.raises(stripe.InvalidRequestError) as info:
        sdk.v1.payment_intents.cancel("pi_refundable_1")  # succeeded: refund it instead
    assert info.value.code == "payment_intent_unexpected_state"


def test_confirm_moves_an_unconfirmed_intent_once(sdk: stripe.StripeClient) -> None:
    made = sdk.v1.payment_intents.create(params={"amount": 700, "currency": "usd", "confirm": False})
    assert made.status == "requires_confirmation" and made.latest_charge is None
    assert sdk.v1.payment_intents.confirm(made.id).status == "succeeded"
    with pytest.raises(stripe.InvalidRequestError) as info:
        sdk.v1.payment_intents.confirm(made.id)
    assert info.value.code == "payment_intent_unexpected_state"


def test_customers_are_created_per_call_unless_the_key_repeats(sdk: stripe.StripeClient) -> None:
    assert sdk.v1.customers.retrieve("cus_ana").email == "ana@example.com"  # existing before
    a = sdk.v1.customers.create(params={"email": "bo@example.com"}, options={"idempotency_key": "c1"})
    assert a.object == "customer" and a.id.startswith("cus_")
    assert (
        sdk.v1.customers.create(params={"email": "bo@example.com"}, options={"idempotency_key": "c1"}).id
        == a.id
    )
    assert sdk.v1.customers.create(params={"email": "bo@example.com"}).id != a.id
    with pytest.raises(stripe.InvalidRequestError) as info:
        sdk.v1.customers.retrieve("cus_nope")
    assert info.value.http_status == 404 and info.value.code == "resource_missing"


@pytest.mark.parametrize(
    ("body", "content_type", "code", "param"),
    [
        (
            "amount=abc&currency=usd",
            "application/x-www-form-urlencoded",
            "parameter_invalid_integer",
            "amount",
        ),
        (
            "amount=-5&currency=usd",
            "application/x-www-form-urlencoded",
            "parameter_invalid_integer",
            "amount",
        ),
        ("amount=0&currency=usd", "application/x-www-form-urlencoded", "parameter_invalid_integer", "amount"),
        ("currency=usd", "application/x-www-form-urlencoded", "parameter_missing", "amount"),
        (json.dumps({"amount": 100, "currency": "usd"}), "application/json", None, None),
        (
            "amount=1&currency=usd&metadata" + "[a]" * 500 + "=x",
            "application/x-www-form-urlencoded",
            None,
            None,
        ),
        ("amount=1&currency=usd&metadata[a][b]=x", "application/x-www-form-urlencoded", None, "metadata[a]"),
    ],
)
def test_bodies_stripe_refuses_are_400_in_its_shape(
    srv: FakesServer, ledger_file: str, body: str, content_type: str, code: str | None, param: str | None
) -> None:
    r = httpx.post(f"{srv.url}/v1/payment_intents", content=body, headers={"Content-Type": content_type})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"] and err["code"] == code
    if param is not None:
        assert err["param"] == param
    assert outcomes(ledger_file, "payments") == []  # refused before anything happened


def test_the_sdk_sees_a_refused_amount_as_invalid_request(sdk: stripe.StripeClient) -> None:
    with pytest.raises(stripe.InvalidRequestError) as info:
        refund(sdk, "r1", payment_intent="pi_refundable_1", amount=-5)
    assert (info.value.http_status, info.value.code, info.value.param) == (
        400,
        "parameter_invalid_integer",
        "amount",
    )


def test_an_existing_objects_file_is_checked_in_one_line(tmp_path: Path) -> None:
    bad = {
        "x.toml": "[[stripe.payment_intents]]\nid = 'pi_0001'\namount = 5\ncurrency = 'usd'\n",
        "y.json": json.dumps(
            {"stripe": {"payment_intents": [{"id": "pi_a", "amount": "5", "currency": "usd"}]}}
        ),
        "z.json": json.dumps({"payments": {}}),
        "r.toml": "[[razorpay.payments]]\nid = 'pay_a'\namount = 500\namount_refunded = 600\n",
        "g.toml": "[[gocardless.payments]]\nid = 'PM_a'\namount = 500\n",  # no currency
        "g2.toml": "[[gocardless.payments]]\nid = 'PM_0001'\namount = 500\ncurrency = 'GBP'\n",
        "w.toml": "not toml [",
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(UsageError) as info:
            load_existing(str(tmp_path / name))
        assert name in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(UsageError, match="No such file"):
        load_existing(str(tmp_path / "missing.toml"))


def test_existing_mail_hook_resources_kv_and_a_legacy_charge_are_found_not_counted(
    ledger_file: str, tmp_path: Path
) -> None:
    path = tmp_path / "existing.toml"
    path.write_text(
        '[[mailbox.messages]]\nto = "ana@example.com"\nsubject = "Your order"\nbody = "Shipped."\n'
        'ref = "order-7-confirmation"\n\n[[hooks.resources]]\nid = "ticket_7"\nstatus = "open"\n\n'
        '[[stripe.charges]]\nid = "ch_legacy_1"\namount = 5000\ncurrency = "usd"\n\n'
        '[kv]\n"config:limit" = 3\n'
    )
    load_existing(str(path)).plant(Ledger(ledger_file, THREAD))
    with FakesServer(ledger_file, thread=THREAD) as server:
        found = httpx.post(f"{server.url}/fakes/mailbox/lookup", json={"ref": "order-7-confirmation"})
        assert found.json()["result"]["subject"] == "Your order"  # a gate reconciling finds the earlier mail
        assert httpx.get(f"{server.url}/hooks/tickets/ticket_7").json()["status"] == "open"
        sdk = stripe.StripeClient("sk_test_x", base_addresses={"api": server.url}, max_network_retries=0)
        assert refund(sdk, "r-legacy", charge="ch_legacy_1", amount=1000).status == "succeeded"
    ledger = Ledger(ledger_file, THREAD)
    assert ledger.kv_get("config:limit") == 3
    assert [(c.provider, c.op) for c in ledger.calls()] == [("payments", "refund")]  # the state is no call


def _declared(cls: type) -> set[str]:
    """The fields the ``stripe`` SDK declares for ``cls`` (it is generated from Stripe's OpenAPI spec)."""
    return {name for klass in cls.__mro__ for name in getattr(klass, "__annotations__", {})}


def test_objects_use_stripes_names_and_send_the_fields_an_agent_reads(sdk: stripe.StripeClient) -> None:
    intent = sdk.v1.payment_intents.retrieve("pi_refundable_1")
    charge = sdk.v1.charges.retrieve("ch_refundable_1")
    made = refund(sdk, "r-shape", payment_intent="pi_refundable_1", amount=100, metadata={"order": "o-1"})
    customer = sdk.v1.customers.create(params={"email": "bo@example.com"}, options={"idempotency_key": "c-1"})
    pairs = ((intent, stripe.PaymentIntent), (charge, stripe.Charge), (made, stripe.Refund))
    for obj, cls in (*pairs, (customer, stripe.Customer)):
        body = obj.to_dict()
        assert body["object"] == cls.OBJECT_NAME
        assert set(body) <= _declared(cls), sorted(set(body) - _declared(cls))  # no name Stripe lacks
    assert (made.payment_intent, made.charge) == ("pi_refundable_1", "ch_refundable_1")
    assert made.metadata.to_dict() == {"order": "o-1"}
    assert made.reason is None and isinstance(made.created, int)  # null, as Stripe sends it, not missing
    again = sdk.v1.refunds.retrieve(made.id)
    assert again.payment_intent == "pi_refundable_1"
    assert intent.client_secret.startswith("pi_refundable_1_secret_") and intent.customer is None
    assert intent.payment_method_types == ["card"] and intent.cancellation_reason is None
    assert charge.description is None and charge.failure_code is None
    assert (customer.name, customer.balance, customer.delinquent) == (None, 0, False)
    assert customer.metadata.to_dict() == {}
    assert sdk.v1.customers.retrieve(customer.id).phone is None
