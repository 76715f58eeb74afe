"""Checkout.com payments, as its idempotency documentation describes them.

Base URL ``$KILLDRILL_FAKES_URL/checkout``: ``POST /payments`` (JSON, recorded as
``checkout.payment``) and ``GET /payments/{id}``.  The rules (checkout.com/docs/payments/
manage-payments/idempotency), one test each in ``tests/unit/fakes/wire/test_providers.py``:

- the key is the ``Cko-Idempotency-Key`` header; keys expire after 24 h (harness clock);
- only a successful (2xx) result is saved: a repeated key returns the same status and body;
- a 4xx or 5xx is not saved: the payment is attempted again under the same key;
- concurrent requests with one key: one is processed, the others get 409;
- a payment without ``amount`` (a whole number, 0 or more) or ``currency`` is 422
  ``{"request_id", "error_type": "request_invalid", "error_codes": [...]}`` (``amount_required``,
  ``amount_invalid``, ``currency_required``; the SDK's ``CheckoutApiException``), nothing saved.

Where it differs: every payment is ``Authorized`` at once (no 3DS, no declines, no ``source``
check); ``202 Pending`` is never answered.
"""

from __future__ import annotations

import re
import uuid

from killdrill.fakes import Answer, FakeProviderError, KeyRules
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, creates, route

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
    codes = [] if isinstance(body.get("amount"), int) and body["amount"] >= 0 else ["amount_invalid"]
    codes = ["amount_required"] if "amount" not in body else codes
    codes += [] if isinstance(body.get("currency"), str) and body["currency"] else ["currency_required"]
    if codes:
        ex.reply(*_error(422, "request_invalid", codes))
        return
    payment = {**body, "approved": True, "status": "Authorized", "action_id": "act_" + uuid.uuid4().hex[:26]}
    key = ex.header(KEY_HEADER)
    ex.finish(
        ex.execute(FakeRequest("checkout", "payment", key, body, creates("checkout", "pay", payment), RULES)),
        _render,
    )


@route(r"/checkout/payments/(?P<id>[A-Za-z0-9_]+)", "GET")
def get_payment(ex: Exchange, m: re.Match[str]) -> None:
    payment = ex.fakes().ledger.effect("checkout", m.group("id"))
    if payment is None:
        ex.reply(404, {"request_id": str(uuid.uuid4())})
        return
    ex.reply(200, payment)
