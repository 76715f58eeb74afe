"""RazorpayX payouts and Razorpay payment refunds, as their idempotency documentation describes them.

Base URL ``$KILLDRILL_FAKES_URL/razorpay``: ``POST /v1/payouts`` (JSON, recorded as
``razorpay.payout``) and ``GET /v1/payouts/{id}``.  The rules (razorpay.com/docs/api/x/
payout-idempotency), one test each in ``tests/unit/fakes/wire/test_providers.py``:

- ``X-Payout-Idempotency`` is mandatory (since 15 March 2025): missing, 400 ``BAD_REQUEST_ERROR``;
- the key is 4-36 characters of letters, digits, hyphens, underscores and spaces, else 400;
- the response to the first request is saved and returned for the same key (failures too);
- another request body under the same key is rejected as ``BAD_REQUEST_ERROR`` (400);
- a key is valid for 7 days (on the harness clock);
- a key whose first request is still processing: 500 ``SERVER_ERROR`` (reason
  ``idempotency_key_in_use``).  The documentation does not say what this answer is; this is
  the fake's assumption, a retryable server error;
- the payout is the documented entity (``id`` ``pout_N``, ``entity``, ``fund_account_id``,
  ``amount``, ``currency``, ``notes``, ``fees``, ``tax``, ``status: processing``, ``purpose``,
  ``utr``, ``mode``, ``reference_id``, ``narration``, ``batch_id``, ``failure_reason``,
  ``created_at`` in Unix seconds on the harness clock, ``status_details``): the RazorpayX account
  number it was paid from is not echoed;
- a payout missing a required field, or with an ``amount`` under 100, is 400
  ``BAD_REQUEST_ERROR`` naming the ``field`` (reason ``input_validation_failed``), nothing saved.

Refunds (razorpay.com/docs/api/refunds/normal-refunds-idempotent): ``POST /v1/payments/{id}/refund``
(``client.payment.refund(id, {"amount": ...}, headers=...)``, recorded as ``razorpay.refund``) of a
captured payment declared with ``--existing`` (``[[razorpay.payments]]``), ``GET /v1/payments/{id}``
and ``GET /v1/refunds/{id}``:

- ``X-Refund-Idempotency`` is optional: without it every request refunds; with it, at least 10
  letters, digits, ``-`` or ``_`` (else 400), the first response is returned again for the same
  body, another body is 400 ``BAD_REQUEST_ERROR`` ("Different request with the same idempotency
  key has already been processed."), and a request while the first is processing is 409;
- refunds are partial, several per payment until its amount is used up (``amount`` omitted: what
  is left; the payment's ``amount_refunded`` and ``refund_status`` ``partial``/``full``); more
  than is left, a payment fully refunded, or one nobody made: 400 ``BAD_REQUEST_ERROR``;
- the refund is ``rfnd_N``, ``entity: refund``, ``status: processed``, ``payment_id``,
  ``created_at`` (harness clock).  How long a refund key is kept is not documented: the fake
  keeps it 24 h (*assumed*), as it saves failures (*assumed*, as for payouts).
"""

from __future__ import annotations

import re
from typing import Any

from killdrill.fakes import Answer, FakeProviderError, KeyRules, harness_now
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, creates, route
from killdrill.ledger import KeyState

__all__ = ["KEY_HEADER", "REFUND_KEY_HEADER", "REFUND_RULES", "RULES"]

KEY_HEADER = "X-Payout-Idempotency"
_KEY_RE = re.compile(r"[A-Za-z0-9 _-]{4,36}")
REFUND_KEY_HEADER = "X-Refund-Idempotency"
_REFUND_KEY_RE = re.compile(r"[A-Za-z0-9_-]{10,255}")


def _in_flight(key: str) -> FakeProviderError:
    return FakeProviderError(
        f"A request with idempotency key {key!r} is still being processed",
        status=500,
        code="idempotency_key_in_use",
    )


def _mismatch(key: str, state: KeyState) -> FakeProviderError:
    return FakeProviderError(
        f"Different request body sent for the same idempotency key {key!r}", code="idempotency_key_reused"
    )


RULES = KeyRules(in_flight=_in_flight, mismatch=_mismatch, ttl=7 * 24 * 3600.0)


def _error(status: int, description: str, reason: str | None = None, field: str | None = None) -> Reply:
    code = "BAD_REQUEST_ERROR" if status < 500 else "SERVER_ERROR"
    body: dict[str, Any] = {
        "error": {
            "code": code,
            "description": description,
            "source": "business" if status < 500 else "internal",
            "step": None,
            "reason": reason or "NA",
            "metadata": {},
            "field": field,
        }
    }
    return status, body, {}


def _render(answer: Answer) -> Reply:
    if answer.error is not None:
        err = answer.error
        return _error(err.status, err.message, err.code, err.param)
    return 200, answer.body, {}


def _validated(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise FakeProviderError("The request body must be a JSON object")
    for name in ("account_number", "fund_account_id", "amount", "currency", "mode", "purpose"):
        if name not in body:
            raise FakeProviderError(f"The {name} field is required.", param=name)
    if not isinstance(body["amount"], int) or body["amount"] < 100:
        raise FakeProviderError("The amount must be at least 100.", param="amount")
    return body


@route(r"/razorpay/v1/payouts", "POST")
def create_payout(ex: Exchange, _m: re.Match[str]) -> None:
    key = ex.header(KEY_HEADER)
    if key is None:
        ex.reply(
            *_error(
                400,
                "Idempotency key is missing. Include idempotency header and key in the request.",
                field=KEY_HEADER,
            )
        )
        return
    if not _KEY_RE.fullmatch(key):
        ex.reply(
            *_error(
                400,
                "The idempotency key must be 4-36 characters of letters, digits, '-', '_' or space.",
                field=KEY_HEADER,
            )
        )
        return
    try:
        payload = _validated(ex.json())
    except FakeProviderError as exc:
        ex.reply(*_error(400, exc.message, "input_validation_failed", exc.param))
        return
    except ValueError as exc:
        ex.reply(*_error(400, str(exc)))
        return
    create = creates("razorpay", "pout", _payout(payload), stamp=lambda now: {"created_at": int(now)})
    ex.finish(ex.execute(FakeRequest("razorpay", "payout", key, payload, create, RULES)), _render)


def _payout(body: dict[str, Any]) -> dict[str, Any]:
    """The payout entity Razorpay answers for a create (its fields, in its order)."""
    return {
        "entity": "payout",
        "fund_account_id": body["fund_account_id"],
        "amount": body["amount"],
        "currency": body["currency"],
        "notes": body.get("notes") or {},
        "fees": 0,
        "tax": 0,
        "status": "processing",
        "purpose": body["purpose"],
        "utr": None,
        "mode": body["mode"],
        "reference_id": body.get("reference_id"),
        "narration": body.get("narration"),
        "batch_id": None,
        "failure_reason": None,
        "status_details": {"reason": None, "description": None, "source": None},
    }


@route(r"/razorpay/v1/payouts/(?P<id>[A-Za-z0-9_]+)", "GET")
def fetch_payout(ex: Exchange, m: re.Match[str]) -> None:
    payout = ex.fakes().ledger.effect("razorpay", m.group("id"))
    if payout is None:
        ex.reply(*_error(400, "The id provided does not exist", field="id"))
        return
    ex.reply(200, payout)


def _refund_in_flight(key: str) -> FakeProviderError:
    return FakeProviderError(
        "A request with the same idempotency key is still being processed", status=409, code="conflict"
    )


def _refund_mismatch(key: str, state: KeyState) -> FakeProviderError:
    return FakeProviderError(
        "Different request with the same idempotency key has already been processed.", code="NA"
    )


REFUND_RULES = KeyRules(in_flight=_refund_in_flight, mismatch=_refund_mismatch)


def _refund(payment_id: str, body: dict[str, Any]) -> Any:
    """The refund of ``body["amount"]`` (else what is left) of a captured payment."""

    def perform(tx: Any) -> tuple[str, dict[str, Any]]:
        payment = tx.get_effect("razorpay", payment_id)
        if payment is None or payment.get("entity") != "payment":
            raise FakeProviderError("The id provided does not exist", param="id")
        total = int(payment.get("amount") or 0)
        left = total - int(payment.get("amount_refunded") or 0)
        if left <= 0:
            raise FakeProviderError("The payment has been fully refunded already", param="amount")
        amount = int(body.get("amount", left))
        if amount > left:
            raise FakeProviderError(
                "The refund amount provided is greater than amount captured", param="amount"
            )
        refund_id = tx.next_id("rfnd")
        refund = {
            "id": refund_id,
            "entity": "refund",
            "amount": amount,
            "currency": payment.get("currency"),
            "payment_id": payment_id,
            "notes": body.get("notes") or {},
            "receipt": body.get("receipt"),
            "acquirer_data": {"arn": None},
            "created_at": int(harness_now(tx)),
            "batch_id": None,
            "status": "processed",
            "speed_processed": "normal",
            "speed_requested": body.get("speed", "normal"),
        }
        done = total - left + amount
        moved = {**payment, "amount_refunded": done, "refund_status": "full" if done >= total else "partial"}
        tx.update_effect("razorpay", payment_id, moved)
        tx.put_effect("razorpay", refund_id, refund)
        return refund_id, refund

    return perform


@route(r"/razorpay/v1/payments/(?P<id>[A-Za-z0-9_]+)/refund", "POST")
def refund_payment(ex: Exchange, m: re.Match[str]) -> None:
    key = ex.header(REFUND_KEY_HEADER)
    if key is not None and not _REFUND_KEY_RE.fullmatch(key):
        message = "The idempotency key must be at least 10 characters of letters, digits, '-' or '_'."
        ex.reply(*_error(400, message, field=REFUND_KEY_HEADER))
        return
    try:
        body = ex.json()
    except ValueError:
        body = None
    body = {} if body is None else body
    amount = body.get("amount") if isinstance(body, dict) else None
    if not isinstance(body, dict) or (
        "amount" in body and (not isinstance(amount, int) or isinstance(amount, bool) or amount < 100)
    ):
        ex.reply(*_error(400, "The amount must be at least INR 1.00.", "input_validation_failed", "amount"))
        return
    payload = {"payment_id": m.group("id"), **body}
    ex.finish(
        ex.execute(
            FakeRequest("razorpay", "refund", key, payload, _refund(m.group("id"), body), REFUND_RULES)
        ),
        _render,
    )


@route(r"/razorpay/v1/(?P<kind>payments|refunds)/(?P<id>[A-Za-z0-9_]+)", "GET")
def fetch_payment_or_refund(ex: Exchange, m: re.Match[str]) -> None:
    found = ex.fakes().ledger.effect("razorpay", m.group("id"))
    if found is None or found.get("entity") != m.group("kind")[:-1]:
        ex.reply(*_error(400, "The id provided does not exist", field="id"))
        return
    ex.reply(200, found)
