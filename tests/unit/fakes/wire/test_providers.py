"""Razorpay payouts (httpx: the SDK has no payouts), GoCardless (its SDK), Checkout.com (httpx):
each provider's documented idempotency rules, one test per rule."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
gocardless_pro = pytest.importorskip("gocardless_pro")

from killdrill.fakes import advance_clock  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes, while_in_flight  # noqa: E402

PAYOUT = {
    "account_number": "7878780080316316",
    "fund_account_id": "fa_0001",
    "amount": 100000,
    "currency": "INR",
    "mode": "IMPS",
    "purpose": "payout",
}
GC_PAYMENT = {"amount": 1500, "currency": "GBP", "links": {"mandate": "MD0001"}}
CKO_PAYMENT = {"amount": 2500, "currency": "GBP", "reference": "ORD-5", "source": {"type": "token"}}


@pytest.fixture
def base(ledger_file: str) -> Iterator[str]:
    with FakesServer(ledger_file, thread=THREAD) as srv:
        assert srv.url is not None
        yield srv.url


# -- Razorpay ------------------------------------------------------------------------------------
def payout(base: str, key: str | None, **body: Any) -> httpx.Response:
    headers = {"X-Payout-Idempotency": key} if key is not None else {}
    return httpx.post(f"{base}/razorpay/v1/payouts", json={**PAYOUT, **body}, headers=headers)


def test_razorpay_key_is_mandatory(base: str, ledger_file: str) -> None:
    r = payout(base, None)
    assert r.status_code == 400 and r.json()["error"]["code"] == "BAD_REQUEST_ERROR"
    assert r.json()["error"]["field"] == "X-Payout-Idempotency"
    assert outcomes(ledger_file, "razorpay") == []


def test_razorpay_key_is_4_to_36_letters_digits_hyphens_underscores_spaces(base: str) -> None:
    assert [payout(base, k).status_code for k in ("abcd", "a" * 36, "pay out_1-x")] == [200, 200, 200]
    assert [payout(base, k).status_code for k in ("abc", "a" * 37, "pay/out")] == [400, 400, 400]


def test_razorpay_replays_the_saved_result_for_the_same_key(base: str, ledger_file: str) -> None:
    first, again = payout(base, "po-1"), payout(base, "po-1")
    assert first.json()["id"] == again.json()["id"] and first.json()["entity"] == "payout"
    assert outcomes(ledger_file, "razorpay") == ["created", "replayed"]


def test_razorpay_rejects_another_body_under_the_same_key(base: str, ledger_file: str) -> None:
    payout(base, "po-2")
    r = payout(base, "po-2", amount=200000)
    assert r.status_code == 400 and r.json()["error"]["code"] == "BAD_REQUEST_ERROR"
    assert outcomes(ledger_file, "razorpay") == ["created", "rejected"]


def test_razorpay_saves_a_failed_result_too(base: str, ledger_file: str) -> None:
    Ledger(ledger_file, THREAD).configure("razorpay", error_first=1)
    assert [payout(base, "po-3").status_code for _ in range(2)] == [500, 500]
    assert outcomes(ledger_file, "razorpay") == ["failed", "replayed"]  # a new key is needed to retry


def test_razorpay_key_is_valid_for_7_days(base: str, ledger_file: str) -> None:
    first = payout(base, "po-4").json()["id"]
    advance_clock(Ledger(ledger_file, THREAD), 6 * 86400)
    assert payout(base, "po-4").json()["id"] == first
    advance_clock(Ledger(ledger_file, THREAD), 86400 + 1)
    assert payout(base, "po-4").json()["id"] != first


def test_razorpay_key_in_progress_is_a_retryable_server_error(base: str, ledger_file: str) -> None:
    r = while_in_flight(ledger_file, "razorpay", lambda: payout(base, "po-5"), lambda: payout(base, "po-5"))
    assert r.status_code == 500 and r.json()["error"]["reason"] == "idempotency_key_in_use"
    assert sorted(outcomes(ledger_file, "razorpay")) == ["conflict", "created"]


# -- GoCardless ----------------------------------------------------------------------------------
def gc(base: str, **kw: Any) -> Any:
    # the SDK joins "/payments" onto the host, dropping the secret path: the secret is its token
    return gocardless_pro.Client(access_token=base.rsplit("/", 1)[1], base_url=base, **kw)


def test_gocardless_a_used_key_is_a_409_conflict_naming_the_resource(base: str, ledger_file: str) -> None:
    first = gc(base).payments.create(params=GC_PAYMENT, headers={"Idempotency-Key": "gc-1"})
    r = httpx.post(f"{base}/payments", json={"payments": GC_PAYMENT}, headers={"Idempotency-Key": "gc-1"})
    assert r.status_code == 409
    error = r.json()["error"]
    assert error["type"] == "invalid_state" and error["errors"][0]["reason"] == "idempotent_creation_conflict"
    assert error["errors"][0]["links"]["conflicting_resource_id"] == first.id
    with pytest.raises(gocardless_pro.errors.IdempotentCreationConflictError) as info:
        gc(base, raise_on_idempotency_conflict=True).payments.create(
            params=GC_PAYMENT, headers={"Idempotency-Key": "gc-1"}
        )
    assert info.value.conflicting_resource_id == first.id
    assert outcomes(ledger_file, "gocardless") == ["created", "rejected", "rejected"]


def test_gocardless_sdk_fetches_the_conflicting_resource(base: str, ledger_file: str) -> None:
    first = gc(base).payments.create(params=GC_PAYMENT, headers={"Idempotency-Key": "gc-2"})
    again = gc(base).payments.create(params=GC_PAYMENT, headers={"Idempotency-Key": "gc-2"})
    assert again.id == first.id and again.amount == 1500
    assert outcomes(ledger_file, "gocardless") == ["created", "rejected"]


def test_gocardless_the_key_alone_decides(base: str, ledger_file: str) -> None:
    first = gc(base).payments.create(params=GC_PAYMENT, headers={"Idempotency-Key": "gc-3"})
    other = gc(base).payments.create(params={**GC_PAYMENT, "amount": 99}, headers={"Idempotency-Key": "gc-3"})
    assert other.id == first.id and other.amount == 1500  # the first payment, not a new one
    assert outcomes(ledger_file, "gocardless") == ["created", "rejected"]


def test_gocardless_a_failed_request_is_safe_to_retry_with_the_same_key(base: str, ledger_file: str) -> None:
    Ledger(ledger_file, THREAD).configure("gocardless", error_first=1)
    client = gc(base)
    with pytest.raises(gocardless_pro.errors.GoCardlessInternalError):
        client.payments.create(params=GC_PAYMENT, headers={"Idempotency-Key": "gc-4"})
    assert client.payments.create(params=GC_PAYMENT, headers={"Idempotency-Key": "gc-4"}).status == (
        "pending_submission"
    )
    assert outcomes(ledger_file, "gocardless") == ["failed", "created"]


def test_gocardless_create_answers_201(base: str) -> None:
    r = httpx.post(f"{base}/payments", json={"payments": GC_PAYMENT}, headers={"Idempotency-Key": "gc-5"})
    assert r.status_code == 201 and r.json()["payments"]["id"].startswith("PM")


def test_gocardless_sdk_automatic_key_is_per_call(base: str, ledger_file: str) -> None:
    client = gc(base)
    ids = {client.payments.create(params=GC_PAYMENT).id for _ in range(2)}
    assert len(ids) == 2  # two calls (two processes, after a kill) are two payments
    keys = [c.key for c in Ledger(ledger_file, THREAD).calls("gocardless")]
    assert all(keys) and keys[0] != keys[1]


def test_gocardless_key_in_flight_is_a_409(base: str, ledger_file: str) -> None:
    def post() -> httpx.Response:
        return httpx.post(
            f"{base}/payments", json={"payments": GC_PAYMENT}, headers={"Idempotency-Key": "gc-6"}
        )

    r = while_in_flight(ledger_file, "gocardless", post, post)
    assert r.status_code == 409 and r.json()["error"]["errors"][0]["reason"] == "idempotency_key_in_use"


# -- Checkout.com --------------------------------------------------------------------------------
def cko(base: str, key: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{base}/checkout/payments", json={**CKO_PAYMENT, **body}, headers={"Cko-Idempotency-Key": key}
    )


def test_checkout_a_success_is_replayed_with_the_same_status_and_body(base: str, ledger_file: str) -> None:
    first, again = cko(base, "c-1"), cko(base, "c-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json() == again.json()
    assert outcomes(ledger_file, "checkout") == ["created", "replayed"]


def test_checkout_an_error_is_not_saved(base: str, ledger_file: str) -> None:
    Ledger(ledger_file, THREAD).configure("checkout", error_first=1)
    assert [cko(base, "c-2").status_code for _ in range(2)] == [500, 201]  # re-attempted under the key
    assert outcomes(ledger_file, "checkout") == ["failed", "created"]


def test_checkout_concurrent_requests_with_one_key_get_409(base: str, ledger_file: str) -> None:
    r = while_in_flight(ledger_file, "checkout", lambda: cko(base, "c-3"), lambda: cko(base, "c-3"))
    assert r.status_code == 409 and r.json()["error_type"] == "request_conflict"


def test_checkout_keys_expire_after_24_hours(base: str, ledger_file: str) -> None:
    first = cko(base, "c-4").json()["id"]
    advance_clock(Ledger(ledger_file, THREAD), 24 * 3600 + 1)
    assert cko(base, "c-4").json()["id"] != first


def checkout_api(base: str) -> Any:
    """The ``checkout_sdk`` client pointed at the fake, as docs/fakes.md tells a user to."""
    sdk_module = pytest.importorskip("checkout_sdk.checkout_sdk")
    from checkout_sdk.environment import Environment

    root = f"{base}/checkout/"
    env = Environment(
        base_uri=root,
        authorization_uri=root + "connect/token",
        files_uri=root,
        transfers_uri=root,
        balances_uri=root,
        forward_uri=root,
        identity_uri=root,
        is_sandbox=True,
    )
    with warnings.catch_warnings():  # the merchant subdomain is for the real host, not 127.0.0.1
        warnings.simplefilter("ignore", DeprecationWarning)
        builder = sdk_module.CheckoutSdk.builder().secret_key("sk_sbox_m73dzbpy7cf3gfd46xr4yj5xo4e")
        return builder.environment(env).use_legacy_domain().build()


def test_checkout_sdk_request_payment_replays_under_its_key(base: str, ledger_file: str) -> None:
    api = checkout_api(base)
    from checkout_sdk.payments.payments import PaymentRequest

    request = PaymentRequest()
    request.amount, request.currency, request.reference = 2500, "GBP", "ORD-5"
    first = api.payments.request_payment(request, "ck-sdk")
    again = api.payments.request_payment(request, "ck-sdk")
    assert first.id == again.id and first.http_metadata.status_code == 201
    assert outcomes(ledger_file, "checkout") == ["created", "replayed"]


@pytest.mark.parametrize(
    ("params", "pointer"),
    [
        ({"currency": "GBP", "links": {"mandate": "MD1"}}, "/payments/amount"),
        ({"amount": -5, "currency": "GBP", "links": {"mandate": "MD1"}}, "/payments/amount"),
        ({"amount": 1500, "links": {"mandate": "MD1"}}, "/payments/currency"),
        ({"amount": 1500, "currency": "GBP", "links": {}}, "/payments/links/mandate"),
    ],
)
def test_gocardless_an_invalid_payment_is_a_422_validation_failed_naming_the_field(
    base: str, ledger_file: str, params: dict[str, Any], pointer: str
) -> None:
    with pytest.raises(gocardless_pro.errors.ValidationFailedError) as info:
        gc(base).payments.create(params=params, headers={"Idempotency-Key": "gc-v"})
    assert info.value.code == 422 and info.value.type == "validation_failed"
    assert [e["request_pointer"] for e in info.value.errors] == [pointer]
    bad = httpx.post(f"{base}/payments", content=b"[1]", headers={"Idempotency-Key": "gc-v"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_api_usage"
    assert outcomes(ledger_file, "gocardless") == []


def test_the_razorpay_sdk_replays_a_payout_under_its_key_and_raises_razorpays_errors(
    base: str, ledger_file: str
) -> None:
    razorpay = pytest.importorskip("razorpay")

    client = razorpay.Client(auth=("rzp_test_x", "secret"), base_url=f"{base}/razorpay")
    first = client.post("/v1/payouts", PAYOUT, headers={"X-Payout-Idempotency": "po-sdk"})
    again = client.post("/v1/payouts", PAYOUT, headers={"X-Payout-Idempotency": "po-sdk"})
    assert first["id"] == again["id"] and first["status"] == "processing"
    with pytest.raises(razorpay.errors.BadRequestError, match="same idempotency key"):
        client.post("/v1/payouts", {**PAYOUT, "amount": 200}, headers={"X-Payout-Idempotency": "po-sdk"})
    with pytest.raises(razorpay.errors.BadRequestError, match="Idempotency key is missing"):
        client.post("/v1/payouts", PAYOUT)
    assert client.get(f"/v1/payouts/{first['id']}", {})["amount"] == PAYOUT["amount"]
    assert outcomes(ledger_file, "razorpay") == ["created", "replayed", "rejected"]


@pytest.mark.parametrize(
    ("body", "codes"),
    [
        ({"amount": -1, "currency": "GBP"}, ["amount_invalid"]),
        ({"amount": "ten", "currency": "GBP"}, ["amount_invalid"]),
        ({"amount": 10}, ["currency_required"]),
    ],
)
def test_checkout_an_invalid_payment_is_a_422_request_invalid_naming_its_codes(
    base: str, ledger_file: str, body: dict[str, Any], codes: list[str]
) -> None:
    r = httpx.post(f"{base}/checkout/payments", json=body, headers={"Cko-Idempotency-Key": "c-v"})
    assert r.status_code == 422 and r.json()["error_type"] == "request_invalid"
    assert r.json()["error_codes"] == codes and r.json()["request_id"]
    assert outcomes(ledger_file, "checkout") == []


def test_checkout_sdk_payment_without_an_amount_is_a_card_verification(base: str, ledger_file: str) -> None:
    api = checkout_api(base)
    from checkout_sdk.payments.payments import PaymentRequest

    request = PaymentRequest()
    request.currency, request.reference = "GBP", "ORD-6"  # no amount: verify the card, charge nothing
    verified = api.payments.request_payment(request, "ck-verify")
    assert (verified.status, verified.amount, verified.approved) == ("Card Verified", 0, True)
    request.amount = 2500
    paid = api.payments.request_payment(request, "ck-pay")
    assert (paid.status, paid.response_code, paid.response_summary) == ("Authorized", "10000", "Approved")
    assert paid.processed_on.endswith("Z") and paid.action_id.startswith("act_") and not paid.risk.flagged
    assert outcomes(ledger_file, "checkout") == ["created", "created"]


def test_checkout_sdk_raises_the_error_codes_of_an_invalid_payment(base: str, ledger_file: str) -> None:
    api = checkout_api(base)
    from checkout_sdk.exception import CheckoutApiException
    from checkout_sdk.payments.payments import PaymentRequest

    request = PaymentRequest()
    request.amount = 2500
    with pytest.raises(CheckoutApiException) as info:
        api.payments.request_payment(request, "ck-bad")
    assert info.value.http_metadata.status_code == 422
    assert (info.value.error_type, info.value.error_details) == ("request_invalid", ["currency_required"])
    assert info.value.request_id and outcomes(ledger_file, "checkout") == []


def test_the_razorpay_payout_is_the_documented_entity(base: str, ledger_file: str) -> None:
    razorpay = pytest.importorskip("razorpay")

    client = razorpay.Client(auth=("rzp_test_x", "secret"), base_url=f"{base}/razorpay")
    body = {**PAYOUT, "reference_id": "ORD-9", "narration": "Refund ORD-9"}
    made = client.post("/v1/payouts", body, headers={"X-Payout-Idempotency": "po-entity"})
    assert made["id"].startswith("pout_") and "account_number" not in made  # the payer's account stays
    assert (made["entity"], made["status"], made["utr"], made["failure_reason"]) == (
        "payout",
        "processing",
        None,
        None,
    )
    assert (made["reference_id"], made["narration"], made["fund_account_id"]) == (
        "ORD-9",
        "Refund ORD-9",
        "fa_0001",
    )
    assert isinstance(made["created_at"], int) and made["status_details"]["reason"] is None
    advance_clock(Ledger(ledger_file, THREAD), 3600)
    later = client.post("/v1/payouts", body, headers={"X-Payout-Idempotency": "po-entity-2"})
    assert later["created_at"] - made["created_at"] >= 3600  # on the harness clock


def test_a_razorpay_payout_missing_a_field_names_it(base: str, ledger_file: str) -> None:
    r = httpx.post(
        f"{base}/razorpay/v1/payouts",
        json={k: v for k, v in PAYOUT.items() if k != "mode"},
        headers={"X-Payout-Idempotency": "po-field"},
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["field"], error["reason"]) == (
        "BAD_REQUEST_ERROR",
        "mode",
        "input_validation_failed",
    )
    assert outcomes(ledger_file, "razorpay") == []


def test_the_gocardless_payment_is_the_documented_resource(base: str, ledger_file: str) -> None:
    payment = gc(base).payments.create(params=GC_PAYMENT, headers={"Idempotency-Key": "gc-res"})
    assert (payment.status, payment.amount_refunded, payment.metadata) == ("pending_submission", 0, {})
    assert payment.links.mandate == "MD0001" and payment.links.creditor.startswith("CR")
    assert payment.created_at.endswith("Z") and payment.charge_date > payment.created_at[:10]
    dated = gc(base).payments.create(
        params={**GC_PAYMENT, "charge_date": "2031-01-02", "reference": "ORD-7"},
        headers={"Idempotency-Key": "gc-res-2"},
    )
    assert (dated.charge_date, dated.reference) == ("2031-01-02", "ORD-7")
    assert gc(base).payments.get(dated.id).charge_date == "2031-01-02"


@pytest.fixture
def rzp(base: str, ledger_file: str, tmp_path: Any) -> Any:
    """The ``razorpay`` SDK, and a captured payment of ₹500 declared as existing before the drill."""
    razorpay = pytest.importorskip("razorpay")
    from killdrill.fakes.existing import load_existing

    path = tmp_path / "existing.toml"
    path.write_text('[[razorpay.payments]]\nid = "pay_order_7"\namount = 50000\n')
    load_existing(str(path)).plant(Ledger(ledger_file, THREAD))
    return razorpay.Client(auth=("rzp_test_x", "secret"), base_url=f"{base}/razorpay")


def rzp_refund(client: Any, key: str | None, **body: Any) -> Any:
    headers = {"X-Refund-Idempotency": key} if key else {}
    return client.payment.refund("pay_order_7", body, headers=headers)


def test_razorpay_refunds_are_partial_until_the_payment_is_used_up(rzp: Any, ledger_file: str) -> None:
    import razorpay

    first = rzp_refund(rzp, "refund-order-7-a", amount=20000)
    assert (first["entity"], first["status"], first["amount"], first["payment_id"]) == (
        "refund",
        "processed",
        20000,
        "pay_order_7",
    )
    assert first["id"].startswith("rfnd_") and isinstance(first["created_at"], int)
    assert rzp.payment.fetch("pay_order_7")["refund_status"] == "partial"
    with pytest.raises(razorpay.errors.BadRequestError, match="greater than amount captured"):
        rzp_refund(rzp, "refund-order-7-b", amount=40000)
    rest = rzp_refund(rzp, None)  # no amount: what is left
    assert rest["amount"] == 30000 and rzp.refund.fetch(rest["id"])["payment_id"] == "pay_order_7"
    payment = rzp.payment.fetch("pay_order_7")
    assert (payment["amount_refunded"], payment["refund_status"]) == (50000, "full")
    with pytest.raises(razorpay.errors.BadRequestError, match="fully refunded already"):
        rzp_refund(rzp, "refund-order-7-c", amount=100)
    assert outcomes(ledger_file, "razorpay") == ["created", "rejected", "created", "rejected"]


def test_razorpay_refund_key_replays_refuses_another_body_and_two_keys_refund_twice(
    rzp: Any, ledger_file: str
) -> None:
    import razorpay

    first, again = (
        rzp_refund(rzp, "refund-order-7-1", amount=1000),
        rzp_refund(rzp, "refund-order-7-1", amount=1000),
    )
    assert first["id"] == again["id"]
    with pytest.raises(
        razorpay.errors.BadRequestError, match="Different request with the same idempotency key"
    ):
        rzp_refund(rzp, "refund-order-7-1", amount=2000)
    other = rzp_refund(rzp, "refund-order-7-2", amount=1000)  # a new key: a second refund, as at Razorpay
    assert other["id"] != first["id"] and rzp.payment.fetch("pay_order_7")["amount_refunded"] == 2000
    assert outcomes(ledger_file, "razorpay") == ["created", "replayed", "rejected", "created"]


def test_razorpay_refund_key_is_10_or_more_letters_digits_hyphens_underscores(
    rzp: Any, base: str, ledger_file: str
) -> None:
    import razorpay

    for bad in ("short-key", "refund key 7"):
        with pytest.raises(razorpay.errors.BadRequestError, match="at least 10 characters"):
            rzp_refund(rzp, bad, amount=1000)
    with pytest.raises(razorpay.errors.BadRequestError, match="does not exist"):
        rzp.payment.refund("pay_nobody", {"amount": 1000})
    assert outcomes(ledger_file, "razorpay") == ["rejected"]  # the unknown payment; bad keys: nothing

    def post() -> httpx.Response:
        return httpx.post(
            f"{base}/razorpay/v1/payments/pay_order_7/refund",
            json={"amount": 1000},
            headers={"X-Refund-Idempotency": "refund-order-7-flight"},
        )

    r = while_in_flight(ledger_file, "razorpay", post, post)
    assert r.status_code == 409 and r.json()["error"]["code"] == "BAD_REQUEST_ERROR"


def cko_payment(api: Any, key: str, **fields: Any) -> Any:
    from checkout_sdk.payments.payments import PaymentRequest

    request = PaymentRequest()
    request.amount, request.currency, request.reference = 10000, "GBP", "ORD-8"
    for name, value in fields.items():
        setattr(request, name, value)
    return api.payments.request_payment(request, key)


def cko_action(api: Any, kind: str, payment_id: str, key: str, amount: int | None = None) -> Any:
    from checkout_sdk.payments.payments import CaptureRequest, RefundRequest, VoidRequest

    request = {"refund": RefundRequest, "capture": CaptureRequest, "void": VoidRequest}[kind]()
    if amount is not None:
        request.amount = amount
    return getattr(api.payments, f"{kind}_payment")(payment_id, request, key)


def test_checkout_refunds_are_partial_until_the_capture_is_used_up(base: str, ledger_file: str) -> None:
    api = checkout_api(base)
    from checkout_sdk.exception import CheckoutApiException

    paid = cko_payment(api, "ck-paid")
    assert api.payments.get_payment_details(paid.id).status == "Captured"  # captured at once by default
    first = cko_action(api, "refund", paid.id, "ck-r1", 4000)
    assert first.http_metadata.status_code == 202 and first.action_id.startswith("act_")
    assert cko_action(api, "refund", paid.id, "ck-r1", 4000).action_id == first.action_id  # replayed
    cko_action(api, "refund", paid.id, "ck-r2", 4000)  # another key: a second refund, as at Checkout.com
    details = api.payments.get_payment_details(paid.id)
    assert (details.status, details.balances.total_refunded, details.balances.available_to_refund) == (
        "Partially Refunded",
        8000,
        2000,
    )
    with pytest.raises(CheckoutApiException) as info:
        cko_action(api, "refund", paid.id, "ck-r3", 3000)
    assert info.value.http_metadata.status_code == 422 and info.value.error_details == [
        "amount_exceeds_balance"
    ]
    cko_action(api, "refund", paid.id, "ck-r4")  # no amount: what is left
    assert api.payments.get_payment_details(paid.id).status == "Refunded"
    with pytest.raises(CheckoutApiException) as info:
        cko_action(api, "refund", paid.id, "ck-r5")
    assert info.value.http_metadata.status_code == 403
    with pytest.raises(CheckoutApiException) as info:
        cko_action(api, "refund", "pay_nobody", "ck-r6")
    assert info.value.http_metadata.status_code == 404
    assert outcomes(ledger_file, "checkout") == [
        "created", "created", "replayed", "created", "rejected", "created", "rejected", "rejected"
    ]  # fmt: skip


def test_checkout_an_authorization_is_captured_once_or_voided(base: str, ledger_file: str) -> None:
    api = checkout_api(base)
    from checkout_sdk.exception import CheckoutApiException

    held = cko_payment(api, "ck-held", capture=False)
    assert api.payments.get_payment_details(held.id).status == "Authorized"
    with pytest.raises(CheckoutApiException) as info:
        cko_action(api, "refund", held.id, "ck-h1")  # nothing captured: nothing to refund
    assert info.value.http_metadata.status_code == 403 and info.value.error_details == ["refund_not_allowed"]
    cko_action(api, "capture", held.id, "ck-h2", 6000)
    details = api.payments.get_payment_details(held.id)
    assert (details.status, details.balances.total_captured, details.balances.available_to_capture) == (
        "Partially Captured",
        6000,
        0,
    )
    for kind in ("capture", "void"):
        with pytest.raises(CheckoutApiException) as info:
            cko_action(api, kind, held.id, f"ck-h3-{kind}")
        assert info.value.http_metadata.status_code == 403
    other = cko_payment(api, "ck-held-2", capture=False)
    cko_action(api, "void", other.id, "ck-v1")
    assert api.payments.get_payment_details(other.id).status == "Voided"
    with pytest.raises(CheckoutApiException):
        cko_action(api, "capture", other.id, "ck-v2")


def gc_refund(base: str, payment: str, amount: int, confirmation: int, key: str | None = None) -> Any:
    params = {"amount": amount, "total_amount_confirmation": confirmation, "links": {"payment": payment}}
    return gc(base).refunds.create(params=params, headers={"Idempotency-Key": key} if key else None)


def test_gocardless_refunds_confirm_the_total_so_a_resent_refund_is_refused(
    base: str, ledger_file: str, tmp_path: Any
) -> None:
    from killdrill.fakes.existing import load_existing

    path = tmp_path / "existing.toml"
    path.write_text('[[gocardless.payments]]\nid = "PM_order_7"\namount = 5000\ncurrency = "GBP"\n')
    load_existing(str(path)).plant(Ledger(ledger_file, THREAD))
    first = gc_refund(base, "PM_order_7", 2000, 2000, key="gc-rf-1")
    assert (first.amount, first.currency, first.status, first.links.payment) == (
        2000,
        "GBP",
        "created",
        "PM_order_7",
    )
    assert gc_refund(base, "PM_order_7", 2000, 2000, key="gc-rf-1").id == first.id  # the SDK fetches it
    with pytest.raises(gocardless_pro.errors.InvalidStateError) as info:
        gc_refund(base, "PM_order_7", 2000, 2000)  # resent under the SDK's new key: the total says no
    assert info.value.errors[0]["reason"] == "total_amount_confirmation_invalid" and info.value.code == 422
    assert gc_refund(base, "PM_order_7", 1000, 3000).amount == 1000  # aware of the first: lands
    assert gc(base).payments.get("PM_order_7").amount_refunded == 3000
    with pytest.raises(gocardless_pro.errors.InvalidStateError) as info:
        gc_refund(base, "PM_order_7", 2500, 5500)
    assert info.value.errors[0]["reason"] == "available_refund_amount_insufficient"
    with pytest.raises(gocardless_pro.errors.ValidationFailedError) as invalid:
        gc(base).refunds.create(params={"amount": 100, "links": {"payment": "PM_order_7"}})
    assert [e["field"] for e in invalid.value.errors] == ["total_amount_confirmation"]
    with pytest.raises(gocardless_pro.errors.InvalidApiUsageError):
        gc_refund(base, "PM_nobody", 100, 100)
    assert gc(base).refunds.get(first.id).amount == 2000
    assert outcomes(ledger_file, "gocardless") == [
        "created",
        "rejected",
        "rejected",
        "created",
        "rejected",
        "rejected",
    ]


def test_gocardless_a_payment_the_agent_made_is_refundable_up_to_25_times(
    base: str, ledger_file: str
) -> None:
    payment = gc(base).payments.create(
        params={**GC_PAYMENT, "amount": 100}, headers={"Idempotency-Key": "gc-p25"}
    )
    for n in range(1, 26):
        gc_refund(base, payment.id, 1, n)
    with pytest.raises(gocardless_pro.errors.InvalidStateError) as info:
        gc_refund(base, payment.id, 1, 26)
    assert info.value.errors[0]["reason"] == "number_of_refunds_exceeded"
    assert gc(base).payments.get(payment.id).amount_refunded == 25
