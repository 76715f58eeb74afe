"""GoCardless payments, as its idempotency keys are documented (gocardless.com/blog/idempotency-keys).

Base URL ``$KILLDRILL_FAKES_URL`` itself (``gocardless_pro.Client(base_url=...)``; the SDK
joins absolute paths, so a prefix would be dropped):
``POST /payments`` (``{"payments": {...}}``, recorded as ``gocardless.payment``) and ``GET
/payments/{id}``.  The rules, one test each in ``tests/unit/fakes/wire/test_providers.py``:

- ``Idempotency-Key`` on a create: a key that already created a resource is never replayed: 409
  ``invalid_state`` with reason ``idempotent_creation_conflict`` and
  ``links.conflicting_resource_id`` (the SDK then fetches that resource);
- the key alone decides: another body under a used key gets the same 409;
- a request that failed is safe to retry with the same key (failures are not stored);
- a key still executing: 409 ``invalid_state``, reason ``idempotency_key_in_use`` (no
  documentation says; the fake's assumption);
- a successful create answers 201;
- a payment without ``amount`` (a positive whole number), ``currency`` or ``links.mandate`` is 422
  ``validation_failed`` with ``errors: [{"field", "message", "request_pointer"}]`` (the SDK's
  ``ValidationFailedError``); a body that is not ``{"payments": {...}}`` 400 ``invalid_api_usage``
  (reason ``invalid_document_structure``: *assumed*); nothing created.

- the payment is the documented resource: ``id`` ``PM_N``, ``created_at`` (harness clock),
  ``charge_date`` (the one asked for, else the day after creation), ``amount``, ``currency``,
  ``description``, ``reference``, ``metadata``, ``amount_refunded`` 0, ``retry_if_possible``,
  ``status: pending_submission``, ``links: {mandate, creditor}`` (the SDK's ``payment.links``).

Refunds (the ``refunds`` service of ``gocardless_pro``; its documentation): ``POST /refunds``
(``{"refunds": {"amount", "total_amount_confirmation", "links": {"payment"}, ...}}``, recorded as
``gocardless.refund``) and ``GET /refunds/{id}``, of a payment the agent made or one declared with
``--existing`` (``[[gocardless.payments]]``):

- the same ``Idempotency-Key`` rules as payments (a used key: 409 with the first refund's id);
- ``total_amount_confirmation`` must be what the payment will have had refunded with this refund
  (the ones before it plus this ``amount``), else 422 ``invalid_state`` reason
  ``total_amount_confirmation_invalid``: "a safeguard to prevent two processes from creating
  refunds without awareness of each other", so a resent refund under a new key is refused once
  the first landed;
- a refund over what is left, or one more after 25 on a payment: 422 ``invalid_state``
  (``available_refund_amount_insufficient``, ``number_of_refunds_exceeded``); no ``amount``, no
  ``links.payment``, no ``total_amount_confirmation``: 422 ``validation_failed``; a payment nobody
  made: 404; nothing refunded.

Where it differs: every mandate exists (no mandate state, no ``charge_date`` rules, one creditor
``CR_0001``); the wording of the field messages is the fake's own; how long a key is kept and how
long it may be GoCardless does not say where we looked: the fake keeps it 24 h, any length; a
refund's refusals are 422 (GoCardless's HTTP status for them is assumed), any payment state may be
refunded, and a refund is ``created`` at once (no ``pending_submission``, no ``paid``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from killdrill.fakes import Answer, FakeProviderError, KeyRules, harness_now
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, creates, iso_time, route
from killdrill.ledger import KeyState

__all__ = ["RULES"]

_DOCS = "https://developer.gocardless.com/api-reference#"


class _Conflict(FakeProviderError):
    status = 409
    type = "invalid_state"


def _in_flight(key: str) -> FakeProviderError:
    return _Conflict(
        f"A request with idempotency key {key!r} is still in progress", code="idempotency_key_in_use"
    )


def _repeat(key: str, state: KeyState) -> FakeProviderError:
    return _Conflict(
        "A resource has already been created with this idempotency key",
        code="idempotent_creation_conflict",
        param=state.effect_id,
    )


RULES = KeyRules(in_flight=_in_flight, mismatch=None, repeat=_repeat, cache_errors=False)


def _error(status: int, message: str, type_: str, reason: str, links: dict[str, Any] | None = None) -> Reply:
    error: dict[str, Any] = {"reason": reason, "message": message}
    if links is not None:
        error["links"] = links
    body = {
        "error": {
            "message": message,
            "documentation_url": _DOCS + reason,
            "type": type_,
            "request_id": str(uuid.uuid4()),
            "code": status,
            "errors": [error],
        }
    }
    return status, body, {}


def _render(answer: Answer, envelope: str = "payments") -> Reply:
    err = answer.error
    if err is None:
        return 201, {envelope: answer.body}, {}
    if err.status in (404, 422) and err.code:
        type_ = "invalid_api_usage" if err.status == 404 else "invalid_state"
        return _error(err.status, err.message, type_, err.code)
    if err.code == "idempotent_creation_conflict":
        return _error(409, err.message, "invalid_state", err.code, {"conflicting_resource_id": err.param})
    if err.status == 409:
        return _error(409, err.message, "invalid_state", err.code or "conflict")
    type_ = "gocardless" if err.status >= 500 else "invalid_api_usage"
    return _error(err.status, err.message, type_, err.code or "error")


def _field_errors(params: dict[str, Any]) -> list[dict[str, str]]:
    """GoCardless's validation errors of a payment: ``{"field", "message", "request_pointer"}``."""
    errors = []
    amount = params.get("amount")
    if amount is None:
        errors.append(("amount", "is required"))
    elif not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        errors.append(("amount", "must be a positive whole number"))
    if not isinstance(params.get("currency"), str) or not params["currency"]:
        errors.append(("currency", "is required"))
    links = params.get("links")
    if not isinstance(links, dict) or not links.get("mandate"):
        errors.append(("links.mandate" if isinstance(links, dict) else "links", "is required"))
    return [
        {"field": f.rsplit(".", 1)[-1], "message": m, "request_pointer": "/payments/" + f.replace(".", "/")}
        for f, m in errors
    ]


def _resource(ex: Exchange, name: str, errors: Callable[[dict[str, Any]], list[dict[str, str]]]) -> Any:
    """The request's ``{NAME: {...}}`` object, or None once refused as GoCardless refuses it (400
    for another shape, 422 ``validation_failed`` listing each field ``errors`` finds)."""
    try:
        body = ex.json()
    except ValueError:
        body = None
    params = body.get(name) if isinstance(body, dict) else None
    if not isinstance(params, dict):
        message = f"The request body must be a JSON object with a {name} object"
        ex.reply(*_error(400, message, "invalid_api_usage", "invalid_document_structure"))
        return None
    invalid = errors(params)
    if invalid:
        status, reply, headers = _error(422, "Validation failed", "validation_failed", "validation_failed")
        reply["error"]["errors"] = invalid
        ex.reply(status, reply, headers)
        return None
    return params


@route(r"/payments", "POST")
def create_payment(ex: Exchange, _m: re.Match[str]) -> None:
    params = _resource(ex, "payments", _field_errors)
    if params is None:
        return
    key = ex.header("Idempotency-Key")
    create = creates("gocardless", "PM", _payment(params), stamp=lambda now: _dates(params, now))
    ex.finish(ex.execute(FakeRequest("gocardless", "payment", key, params, create, RULES)), _render)


def _payment(params: dict[str, Any]) -> dict[str, Any]:
    """The payment resource GoCardless answers for a create, its defaults filled."""
    return {
        "amount": params["amount"],
        "currency": params["currency"],
        "description": params.get("description"),
        "reference": params.get("reference"),
        "metadata": params.get("metadata") or {},
        "amount_refunded": 0,
        "retry_if_possible": params.get("retry_if_possible", True),
        "status": "pending_submission",
        **{k: v for k, v in params.items() if k not in ("links", "charge_date")},
        "links": {"creditor": "CR_0001", **params["links"]},
    }


def _dates(params: dict[str, Any], now: float) -> dict[str, Any]:
    """``created_at`` now; ``charge_date`` as asked, else the next day (as soon as possible)."""
    tomorrow = datetime.fromtimestamp(now + 86400, timezone.utc).date().isoformat()
    return {"created_at": iso_time(now), "charge_date": params.get("charge_date") or tomorrow}


@route(r"/payments/(?P<id>[A-Za-z0-9_]+)", "GET")
def get_payment(ex: Exchange, m: re.Match[str]) -> None:
    payment = ex.fakes().ledger.effect("gocardless", m.group("id"))
    if payment is None or "amount_refunded" not in payment:
        ex.reply(*_error(404, "Resource not found", "invalid_api_usage", "resource_not_found"))
        return
    ex.reply(200, {"payments": {k: v for k, v in payment.items() if k != "refunds_count"}})


MAX_REFUNDS = 25
"""Refunds one payment may have (``number_of_refunds_exceeded`` beyond)."""


def _refund_errors(params: dict[str, Any]) -> list[dict[str, str]]:
    """The validation errors of a refund: ``amount``, ``total_amount_confirmation``, ``links.payment``."""
    errors = [
        (name, "is required" if params.get(name) is None else "must be a positive whole number")
        for name in ("amount", "total_amount_confirmation")
        if not isinstance(params.get(name), int) or isinstance(params.get(name), bool) or params[name] < 1
    ]
    links = params.get("links")
    if not isinstance(links, dict) or not isinstance(links.get("payment"), str) or not links["payment"]:
        errors.append(("links.payment", "is required"))
    return [
        {"field": f.rsplit(".", 1)[-1], "message": m, "request_pointer": "/refunds/" + f.replace(".", "/")}
        for f, m in errors
    ]


def _refund(params: dict[str, Any]) -> Any:
    """The refund of ``amount`` of the linked payment, as its confirmation and what is left allow."""
    payment_id = params["links"]["payment"]

    def perform(tx: Any) -> tuple[str, dict[str, Any]]:
        payment = tx.get_effect("gocardless", payment_id)
        if payment is None or "amount_refunded" not in payment:
            raise FakeProviderError("Resource not found", status=404, code="resource_not_found")
        before, amount = int(payment["amount_refunded"]), params["amount"]
        if params["total_amount_confirmation"] != before + amount:
            message = "The total_amount_confirmation does not match the total amount refunded for the payment"
            raise FakeProviderError(message, status=422, code="total_amount_confirmation_invalid")
        if before + amount > int(payment["amount"]):
            message = "The amount to refund is more than what is left of the payment"
            raise FakeProviderError(message, status=422, code="available_refund_amount_insufficient")
        if int(payment.get("refunds_count") or 0) >= MAX_REFUNDS:
            message = f"A payment may have at most {MAX_REFUNDS} refunds"
            raise FakeProviderError(message, status=422, code="number_of_refunds_exceeded")
        count = int(payment.get("refunds_count") or 0) + 1
        tx.update_effect(
            "gocardless", payment_id, {**payment, "amount_refunded": before + amount, "refunds_count": count}
        )
        refund_id = tx.next_id("RF")
        refund = {
            "id": refund_id,
            "created_at": iso_time(harness_now(tx)),
            "amount": amount,
            "currency": payment.get("currency"),
            "reference": params.get("reference"),
            "metadata": params.get("metadata") or {},
            "status": "created",
            "links": {"payment": payment_id, "mandate": (payment.get("links") or {}).get("mandate")},
        }
        tx.put_effect("gocardless", refund_id, refund)
        return refund_id, refund

    return perform


@route(r"/refunds", "POST")
def create_refund(ex: Exchange, _m: re.Match[str]) -> None:
    params = _resource(ex, "refunds", _refund_errors)
    if params is None:
        return
    key = ex.header("Idempotency-Key")
    request = FakeRequest("gocardless", "refund", key, params, _refund(params), RULES)
    ex.finish(ex.execute(request), lambda answer: _render(answer, "refunds"))


@route(r"/refunds/(?P<id>[A-Za-z0-9_]+)", "GET")
def get_refund(ex: Exchange, m: re.Match[str]) -> None:
    refund = ex.fakes().ledger.effect("gocardless", m.group("id"))
    if refund is None or not m.group("id").startswith("RF"):
        ex.reply(*_error(404, "Resource not found", "invalid_api_usage", "resource_not_found"))
        return
    ex.reply(200, {"refunds": refund})
