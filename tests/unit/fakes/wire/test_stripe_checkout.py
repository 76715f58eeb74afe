"""Stripe Checkout Sessions through the real ``stripe`` SDK: created once per key, expired once,
refused as Stripe refuses them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

stripe = pytest.importorskip("stripe")
httpx = pytest.importorskip("httpx")

from killdrill.fakes import advance_clock  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes  # noqa: E402

ITEMS = [
    {"price_data": {"currency": "EUR", "unit_amount": 1500, "product_data": {"name": "Mug"}}, "quantity": 2}
]
SESSION = {
    "mode": "payment",
    "line_items": ITEMS,
    "success_url": "https://shop.example/ok",
    "client_reference_id": "o-7",
}


@pytest.fixture
def sdk(ledger_file: str) -> Iterator[stripe.StripeClient]:
    with FakesServer(ledger_file, thread=THREAD) as server:
        yield stripe.StripeClient("sk_test_x", base_addresses={"api": server.url}, max_network_retries=0)


def create(sdk: stripe.StripeClient, key: str, **params: Any) -> Any:
    """A session of ``SESSION`` with ``params`` over it (None: left out)."""
    body = {k: v for k, v in {**SESSION, **params}.items() if v is not None}
    return sdk.v1.checkout.sessions.create(params=body, options={"idempotency_key": key})  # type: ignore[arg-type]


def test_a_session_is_created_once_per_key_and_two_keys_are_two_pages(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    first, again = create(sdk, "cs-1"), create(sdk, "cs-1")
    assert first.id == again.id and first.id.startswith("cs_")
    other = create(sdk, "cs-2")  # a resumed run under a new key: a second page for the customer
    assert other.id != first.id
    assert outcomes(ledger_file, "payments") == ["created", "replayed", "created"]
    assert {c.op for c in Ledger(ledger_file, THREAD).calls()} == {"create_checkout_session"}


def test_a_session_is_open_with_its_url_amounts_and_expiry(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    session = create(sdk, "cs-3", metadata={"order": "o-7"})
    assert (session.object, session.status, session.payment_status) == ("checkout.session", "open", "unpaid")
    assert session.url.startswith("https://checkout.stripe.com/") and session.client_reference_id == "o-7"
    assert (session.amount_total, session.amount_subtotal, session.currency) == (3000, 3000, "eur")
    assert session.expires_at - session.created == 24 * 3600 and session.payment_intent is None
    declared = {n for k in stripe.checkout.Session.__mro__ for n in getattr(k, "__annotations__", {})}
    assert set(session.to_dict()) <= declared, sorted(set(session.to_dict()) - declared)
    assert sdk.v1.checkout.sessions.retrieve(session.id).metadata.to_dict() == {"order": "o-7"}
    advance_clock(Ledger(ledger_file, THREAD), 3600)
    assert create(sdk, "cs-4").created - session.created >= 3600  # the harness clock
    setup = create(sdk, "cs-5", mode="setup", line_items=None)
    assert (setup.payment_status, setup.amount_total) == ("no_payment_required", None)


def test_a_session_expires_once(sdk: stripe.StripeClient, ledger_file: str) -> None:
    session = create(sdk, "cs-6")
    expired = sdk.v1.checkout.sessions.expire(session.id)
    assert (expired.status, expired.url) == ("expired", None)
    with pytest.raises(stripe.InvalidRequestError, match="status in \\[open\\]"):
        sdk.v1.checkout.sessions.expire(session.id)
    assert sdk.v1.checkout.sessions.retrieve(session.id).status == "expired"
    with pytest.raises(stripe.InvalidRequestError) as info:
        sdk.v1.checkout.sessions.retrieve("cs_nobody")
    assert info.value.http_status == 404 and info.value.code == "resource_missing"
    assert outcomes(ledger_file, "payments") == ["created", "created", "rejected"]


@pytest.mark.parametrize(
    ("params", "param", "code"),
    [
        ({"mode": None}, "mode", "parameter_missing"),
        ({"line_items": None}, "line_items", "parameter_missing"),
        ({"mode": "donate"}, "mode", "parameter_invalid_enum"),
        (
            {"line_items": [{"price_data": {"currency": "eur", "unit_amount": "ten"}}]},
            None,
            "parameter_invalid_integer",
        ),
    ],
)
def test_a_session_stripe_refuses_is_its_400_and_nothing(
    sdk: stripe.StripeClient, ledger_file: str, params: dict[str, Any], param: str | None, code: str
) -> None:
    body = {k: v for k, v in {**SESSION, **params}.items() if v is not None}
    with pytest.raises(stripe.InvalidRequestError) as info:
        sdk.v1.checkout.sessions.create(params=body, options={"idempotency_key": "cs-bad"})  # type: ignore[arg-type]
    assert info.value.http_status == 400 and info.value.code == code
    assert param is None or info.value.param == param
    assert outcomes(ledger_file, "payments") == []
