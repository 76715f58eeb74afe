"""Stripe's documented idempotency rules, one test each, through the real ``stripe`` SDK."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

stripe = pytest.importorskip("stripe")

from killdrill.fakes import advance_clock  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes, while_in_flight  # noqa: E402

PARAMS = {"amount": 900, "currency": "usd", "metadata": {"order": "o-7"}}


@pytest.fixture
def sdk(ledger_file: str) -> Iterator[stripe.StripeClient]:
    with FakesServer(ledger_file, thread=THREAD) as srv:
        yield stripe.StripeClient("sk_test_x", base_addresses={"api": srv.url}, max_network_retries=0)


def create(sdk: stripe.StripeClient, key: str, **params: object) -> stripe.PaymentIntent:
    return sdk.v1.payment_intents.create(params={**PARAMS, **params}, options={"idempotency_key": key})


def test_keys_are_up_to_255_characters(sdk: stripe.StripeClient, ledger_file: str) -> None:
    assert create(sdk, "k" * 255).amount == 900
    with pytest.raises(stripe.InvalidRequestError) as info:
        create(sdk, "k" * 256)
    assert info.value.http_status == 400
    assert outcomes(ledger_file, "payments") == ["created"]  # the refused request did nothing


def test_a_key_lives_24_hours_on_the_harness_clock(sdk: stripe.StripeClient, ledger_file: str) -> None:
    first = create(sdk, "daily")
    advance_clock(Ledger(ledger_file, THREAD), 23 * 3600)
    assert create(sdk, "daily").id == first.id
    advance_clock(Ledger(ledger_file, THREAD), 3600 + 1)
    assert create(sdk, "daily").id != first.id  # pruned: the same key makes a new request
    assert outcomes(ledger_file, "payments") == ["created", "replayed", "created"]


def test_same_key_other_parameters_is_an_idempotency_error(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    create(sdk, "k1")
    with pytest.raises(stripe.IdempotencyError) as info:
        create(sdk, "k1", amount=901)
    assert info.value.http_status == 400 and info.value.json_body["error"]["type"] == "idempotency_error"
    assert outcomes(ledger_file, "payments") == ["created", "rejected"]


def test_a_key_still_executing_gets_409_in_use_with_should_retry(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    def second() -> stripe.StripeError:
        with pytest.raises(stripe.StripeError) as info:
            create(sdk, "slow")
        return info.value

    err = while_in_flight(ledger_file, "payments", lambda: create(sdk, "slow"), second)
    assert err.http_status == 409 and err.json_body["error"]["code"] == "idempotency_key_in_use"
    assert err.headers["Stripe-Should-Retry"] == "true"
    assert sorted(outcomes(ledger_file, "payments")) == ["conflict", "created"]


def test_a_500_after_execution_began_is_saved_and_replayed(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    Ledger(ledger_file, THREAD).configure("payments", error_first=1)
    errors = []
    for _ in range(2):
        with pytest.raises(stripe.APIError) as info:
            create(sdk, "boom")
        errors.append(info.value)
    assert [e.http_status for e in errors] == [500, 500]
    assert errors[1].headers["Idempotent-Replayed"] == "true"
    assert outcomes(ledger_file, "payments") == ["failed", "replayed"]  # nothing charged, ever


def test_a_429_is_not_saved(sdk: stripe.StripeClient, ledger_file: str) -> None:
    Ledger(ledger_file, THREAD).configure("payments", rate_limit_first=1)
    with pytest.raises(stripe.RateLimitError) as info:
        create(sdk, "busy")
    assert info.value.http_status == 429 and info.value.headers["Stripe-Should-Retry"] == "true"
    assert create(sdk, "busy").status == "succeeded"  # the retry executes
    assert outcomes(ledger_file, "payments") == ["failed", "created"]


def test_a_validation_error_is_not_saved(sdk: stripe.StripeClient, ledger_file: str) -> None:
    with pytest.raises(stripe.InvalidRequestError) as info:  # no such charge yet: refused, not stored
        sdk.v1.refunds.create(params={"payment_intent": "pi_0001"}, options={"idempotency_key": "ref-1"})
    assert info.value.http_status == 400
    intent = create(sdk, "pay-1")
    assert intent.id == "pi_0001"
    refund = sdk.v1.refunds.create(params={"payment_intent": intent.id}, options={"idempotency_key": "ref-1"})
    assert refund.status == "succeeded"  # the same key executes now
    assert outcomes(ledger_file, "payments") == ["rejected", "created", "created"]


def test_a_replay_says_idempotent_replayed(sdk: stripe.StripeClient, ledger_file: str) -> None:
    first, again = create(sdk, "twice"), create(sdk, "twice")
    assert first.last_response.headers["Idempotent-Replayed"] == "false"
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    assert again.id == first.id


def test_errors_say_whether_to_retry(sdk: stripe.StripeClient, ledger_file: str) -> None:
    create(sdk, "k2")
    with pytest.raises(stripe.IdempotencyError) as refused:
        create(sdk, "k2", amount=1)
    assert refused.value.headers["Stripe-Should-Retry"] == "false"  # the same request can never succeed
    Ledger(ledger_file, THREAD).configure("payments", fail_first=1)
    with pytest.raises(stripe.StripeError) as unavailable:
        create(sdk, "k3")
    assert unavailable.value.http_status == 503 and unavailable.value.headers["Stripe-Should-Retry"] == "true"
