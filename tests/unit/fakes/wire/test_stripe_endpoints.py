"""The Stripe endpoints a newcomer's code calls: PaymentIntents come back as ``pi_...``
(with their charge as ``latest_charge``), and the legacy ``stripe.Charge.create`` (``POST
/v1/charges``) is served as the same ``payments.charge`` effect."""

from __future__ import annotations

import pytest

from killdrill.fakes.http import FakesServer
from killdrill.ledger import Ledger
from tests.unit.fakes.test_http import request

stripe = pytest.importorskip("stripe")

FORM = "amount=4200&currency=gbp&metadata[order]=o-1"


def test_a_payment_intent_has_a_pi_id_and_is_found_and_refunded_by_it(server: FakesServer) -> None:
    status, _, intent = request(server, "POST", "/v1/payment_intents", FORM, {"Idempotency-Key": "o-1"})
    assert status == 200 and intent["id"] == "pi_0001" and intent["latest_charge"] == "ch_0001"
    assert request(server, "GET", f"/v1/payment_intents/{intent['id']}")[2]["id"] == "pi_0001"
    status, _, refund = request(server, "POST", "/v1/refunds", f"payment_intent={intent['id']}")
    assert status == 200 and refund["charge"] == "ch_0001"


def test_charge_create_of_the_sdk_is_served_and_recorded_as_payments_charge(
    server: FakesServer, ledger_file: str
) -> None:
    stripe.api_key = "sk_test_x"
    stripe.api_base = server.url
    try:
        first = stripe.Charge.create(amount=4200, currency="gbp", source="tok_visa", idempotency_key="o-1")
        again = stripe.Charge.create(amount=4200, currency="gbp", source="tok_visa", idempotency_key="o-1")
        assert first.id == again.id == "ch_0001" and first.object == "charge" and first.paid
        assert stripe.Charge.retrieve(first.id).amount == 4200
    finally:
        stripe.api_base = "https://api.stripe.com"
    calls = Ledger(ledger_file, "t").calls("payments", "charge")
    assert [(c.key, c.outcome) for c in calls] == [("o-1", "created"), ("o-1", "replayed")]
