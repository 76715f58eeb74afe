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

Payment actions, idempotent under the same key rules (checkout.com/docs/developer-resources/api/
idempotency): ``POST /payments/{id}/captures``, ``/refunds``, ``/voids`` (``checkout.capture``,
``.refund``, ``.void``; the SDK's ``capture_payment``, ``refund_payment``, ``void_payment``) answer
202 ``{"action_id", "reference", "_links"}``.  A payment is captured at once unless it was requested
with ``capture: false``; a capture takes what was authorized (or ``amount`` of it), once; refunds are
partial, several until what was captured is used up; a void releases an authorization not
captured.  ``GET /payments/{id}`` answers the payment's ``status`` (``Captured``, ``Partially
Refunded``, ``Refunded``, ``Voided``, ...) and ``balances`` (``total_authorized``,
``total_captured``, ``total_refunded``, ``total_voided``, ``available_to_capture``,
``available_to_refund``, ``available_to_void``).  An action the payment's state does not allow is
403, an amount over what is available 422 ``request_invalid`` (``amount_exceeds_balance``), a
payment nobody made 404; nothing is saved under the key.

Where it differs: no 3DS, no declines, no ``source`` check; ``202 Pending`` is never answered; the
response echoes the request's own fields (``source`` as sent, not described as a card) and carries
no ``_links``; a capture is at once (Checkout.com captures later); one capture per payment; the
body of a 403 (``error_type: action_not_allowed``) and the 422's code are the fake's own.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

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


def _render(answer: Answer, status: int = 201) -> Reply:
    err = answer.error
    if err is None:
        body = {k: v for k, v in answer.body.items() if k != "balances"}  # GET's, not the create's
        return status, body, {"Cko-Request-Id": str(uuid.uuid4())}
    if err.status == 404:
        return 404, {"request_id": str(uuid.uuid4())}, {}
    kind = {409: "request_conflict", 403: "action_not_allowed"}.get(
        err.status, "request_invalid" if err.status < 500 else "server_error"
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
    captured = amount if body.get("capture", True) is not False else 0
    balances = {
        "total_authorized": amount,
        "total_captured": captured,
        "total_refunded": 0,
        "total_voided": 0,
    }
    payment = {
        **body,
        "balances": balances,
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


@route(r"/checkout/payments/(?P<id>[A-Za-z0-9_]+)", "GET")
def get_payment(ex: Exchange, m: re.Match[str]) -> None:
    payment = ex.fakes().ledger.effect("checkout", m.group("id"))
    if payment is None or "balances" not in payment:
        ex.reply(404, {"request_id": str(uuid.uuid4())})
        return
    ex.reply(200, {**payment, **_state(payment["balances"], payment.get("amount"))})


def _state(b: dict[str, int], amount: Any) -> dict[str, Any]:
    """A payment's ``status`` and ``balances`` (with what is available) as its totals leave it."""
    auth, captured, refunded, voided = (
        b["total_authorized"], b["total_captured"], b["total_refunded"], b["total_voided"]
    )  # fmt: skip
    status = (
        "Voided" if voided
        else ("Refunded" if refunded == captured else "Partially Refunded") if refunded
        else ("Captured" if captured == auth else "Partially Captured") if captured
        else "Authorized" if amount else "Card Verified"
    )  # fmt: skip
    open_ = bool(auth) and not captured and not voided
    available = {
        "available_to_capture": auth if open_ else 0,
        "available_to_void": auth if open_ else 0,
        "available_to_refund": captured - refunded,
    }
    return {"status": status, "balances": {**b, **available}}


_ACTIONS = {"captures": ("capture", "Capture"), "refunds": ("refund", "Refund"), "voids": ("void", "Void")}


@route(r"/checkout/payments/(?P<id>[A-Za-z0-9_]+)/(?P<kind>captures|refunds|voids)", "POST")
def act_on_payment(ex: Exchange, m: re.Match[str]) -> None:
    try:
        body = ex.json()
    except ValueError:
        body = "not JSON"
    body = {} if body is None else body
    amount = body.get("amount") if isinstance(body, dict) else None
    if not isinstance(body, dict) or (
        "amount" in body and (not isinstance(amount, int) or isinstance(amount, bool) or amount < 0)
    ):
        code = "amount_invalid" if isinstance(body, dict) else "invalid_json"
        ex.reply(*_error(422, "request_invalid", [code]))
        return
    op = _ACTIONS[m.group("kind")][0]
    payload = {"payment_id": m.group("id"), **body}
    act = _act(m.group("id"), m.group("kind"), body)
    request = FakeRequest("checkout", op, ex.header(KEY_HEADER), payload, act, RULES)
    ex.finish(ex.execute(request), lambda answer: _render(answer, 202))


def _act(payment_id: str, kind: str, body: dict[str, Any]) -> Any:
    """One action on a payment, as its balances allow it (403 when they do not)."""
    op, name = _ACTIONS[kind]

    def perform(tx: Any) -> tuple[str, dict[str, Any]]:
        payment = tx.get_effect("checkout", payment_id)
        if payment is None or "balances" not in payment:
            raise FakeProviderError("Payment not found", status=404)
        b = dict(payment["balances"])
        left = _state(b, payment.get("amount"))["balances"]["available_to_" + op]
        if left <= 0:
            raise FakeProviderError(f"{name} not allowed", status=403, code=f"{op}_not_allowed")
        amount = body.get("amount", left)
        if amount > left:
            raise FakeProviderError(
                f"{name} amount exceeds the balance", status=422, code="amount_exceeds_balance"
            )
        total = {"capture": "total_captured", "refund": "total_refunded", "void": "total_voided"}[op]
        b[total] += left if op == "void" else amount
        tx.update_effect("checkout", payment_id, {**payment, "balances": b})
        action_id = "act_" + uuid.uuid4().hex[:26]
        links = {"payment": {"href": f"/payments/{payment_id}"}}
        action = {"action_id": action_id, "reference": body.get("reference"), "_links": links}
        tx.put_effect(
            "checkout", action_id, {**action, "type": name, "amount": amount, "payment_id": payment_id}
        )
        return action_id, action

    return perform
