"""Checkout.com payments, as its idempotency documentation describes them.

Base URL ``$KILLDRILL_FAKES_URL/checkout``: ``POST /payments`` (JSON, recorded as
``checkout.payment``) and ``GET /payments/{id}``.  The rules (checkout.com/docs/payments/
manage-payments/idempotency), one test each in ``tests/unit/fakes/wire/test_providers.py``:

- the key is the ``Cko-Idempotency-Key`` header; keys expire after 24 h (harness clock);
- only a successful (2xx) result is saved: a repeated key returns the same status and body;
- a 4xx or 5xx is not saved: the payment is attempted again under the same key;
- concurrent requests with one key: one is processed, the others get 409;
- ``amount`` omitted or 0 is a card verification (checkout.com/docs/risk-management/
  card-verification): ``status: "Card Verified"``, ``amount: 0``; any other amount is
  ``Authorized``; both answer 201 with ``approved``, ``response_code`` ``10000``,
  ``response_summary`` ``Approved``, ``processed_on`` (harness clock), ``action_id`` and ``risk``;
- a payment whose ``amount`` is not a whole number 0 or more, or without ``currency``, is 422
  ``{"request_id", "error_type": "request_invalid", "error_codes": [...]}`` (``amount_invalid``,
  ``currency_required``; the SDK's ``CheckoutApiException``), nothing saved.

Where it differs: no 3DS, no declines, no ``source`` check; ``202 Pending`` is never answered; the
response echoes the request's own fields (``source`` as sent, not described as a card) and carries
no ``_links``.
"""

from __future__ import annotations

import re
import uuid

from killdrill.fakes import Answer, FakeProviderError, KeyRules
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, creates, iso_time, route

__all__ = ["KEY_HEADER", "RULES"]

KEY_HEADER = "Cko-Idempotency-Key"


def _in_flight(key: str) -> FakeProviderError:
    return FakeProviderError(
        "Conflict with another request being processed", status=409, code="request_conflict"
    )


RULES = KeyRules(in_flight=_in_flight, mismatch=None, cache_errors=False)


def _error(status: int, error_type: str, codes: list[str]) -> Reply:
    return status, {"request_id": str(uuid.uuid4()), "error_type": error_type, "error_codes": codes}, {}


def _render(answer: Answer) -> Reply:
    err = answer.error
    if err is None:
        return 201, answer.body, {"Cko-Request-Id": str(uuid.uuid4())}
    kind = (
        "request_conflict" if err.status == 409 else "request_invalid" if err.status < 500 else "server_error"
    )
    return _error(err.status, kind, [err.code or kind])


@route(r"/checkout/payments", "POST")
def request_payment(ex: Exchange, _m: re.Match[str]) -> None:
    try:
        body = ex.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        ex.reply(*_error(422, "request_invalid", ["invalid_json"]))
        return
    amount = body.get("amount", 0)
    codes = (
        [] if isinstance(amount, int) and not isinstance(amount, bool) and amount >= 0 else ["amount_invalid"]
    )
    codes += [] if isinstance(body.get("currency"), str) and body["currency"] else ["currency_required"]
    if codes:
        ex.reply(*_error(422, "request_invalid", codes))
        return
    payment = {
        **body,
        "amount": amount,
        "approved": True,
        "status": "Authorized" if amount else "Card Verified",
        "response_code": "10000",
        "response_summary": "Approved",
        "risk": {"flagged": False},
        "action_id": "act_" + uuid.uuid4().hex[:26],
    }
    key = ex.header(KEY_HEADER)
    create = creates("checkout", "pay", payment, stamp=lambda now: {"processed_on": iso_time(now)})
    ex.finish(ex.execute(FakeRequest("checkout", "payment", key, body, create, RULES)), _render)
