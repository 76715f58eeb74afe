"""Stripe Checkout Sessions, on the Payments fake (the same idempotency namespace as its charges).

- ``POST /v1/checkout/sessions`` (``payments.create_checkout_session``; ``cs_N``): a payment page
  for one customer, a new one per call unless the key repeats, so two keys are two pages sent;
  ``mode`` is required (``payment``, ``setup``, ``subscription``), ``line_items`` too unless the
  mode is ``setup`` (Stripe's 400 ``parameter_missing``); the session is ``open``,
  ``payment_status`` ``unpaid`` (``no_payment_required`` in setup mode), with its ``url``,
  ``amount_subtotal``/``amount_total`` from the items' ``price_data`` and ``expires_at`` 24 h after
  ``created`` (harness clock);
- ``GET /v1/checkout/sessions/{id}``;
- ``POST /v1/checkout/sessions/{id}/expire`` (``payments.expire_checkout_session``): ``expired``,
  its ``url`` null; a session that is not open is a 400.

Where it differs: nobody pays (a session never completes, no PaymentIntent is made, no webhook);
a ``price`` id is taken as given (no amount is known for it); ``line_items`` are not returned.
"""

from __future__ import annotations

import re
from typing import Any

from killdrill.fakes.wire import Exchange, route
from killdrill.fakes.wire.stripe import call, form, idempotency_key, param_error, stored

__all__ = ["session_object"]

_MODES = ("payment", "setup", "subscription")
_NULLABLE = (
    "customer",
    "customer_email",
    "client_reference_id",
    "payment_intent",
    "success_url",
    "cancel_url",
)


def session_object(session: dict[str, Any]) -> dict[str, Any]:
    """Render a session as Stripe sends one (``line_items`` only when expanded: never here)."""
    body = {k: v for k, v in session.items() if k != "line_items"}
    total = _total(session.get("line_items"))
    body.update(amount_subtotal=total, amount_total=total, livemode=False)
    prices = [
        i["price_data"] for i in session.get("line_items") or () if isinstance(i, dict) and "price_data" in i
    ]
    currency = prices[0].get("currency") if prices and isinstance(prices[0], dict) else None
    body.setdefault("currency", str(currency).lower() if currency else None)
    body.setdefault("metadata", {})
    body["payment_status"] = "no_payment_required" if session.get("mode") == "setup" else "unpaid"
    open_ = session.get("status") == "open"
    body["url"] = f"https://checkout.stripe.com/c/pay/{session['id']}" if open_ else None
    for name in _NULLABLE:
        body.setdefault(name, None)
    return body


def _total(items: Any) -> int | None:
    """What the items cost, when every one has its ``price_data`` (a ``price`` id's amount is not
    known to the fake): ``unit_amount`` times ``quantity``; None otherwise."""
    if not isinstance(items, list) or not items:
        return None
    total = 0
    for item in items:
        price = item.get("price_data") if isinstance(item, dict) else None
        amount = price.get("unit_amount") if isinstance(price, dict) else None
        quantity = item.get("quantity", "1") if isinstance(item, dict) else None
        if not (
            isinstance(amount, str) and amount.isdigit() and isinstance(quantity, str) and quantity.isdigit()
        ):
            return None
        total += int(amount) * int(quantity)
    return total


def _refused_items(items: Any) -> tuple[str, str, str] | None:
    """Stripe's refusal of ``line_items`` that are not a list of items with whole-number
    ``quantity`` and ``price_data[unit_amount]``: ``(message, code, param)``, else None."""
    if not isinstance(items, list):
        return "Invalid array", "parameter_invalid_array", "line_items"
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return "Invalid object", "parameter_invalid_object", f"line_items[{i}]"
        price = item.get("price_data")
        fields = [("quantity", item.get("quantity"))]
        fields += [("price_data][unit_amount", price.get("unit_amount"))] if isinstance(price, dict) else []
        for name, value in fields:
            if value is not None and not (isinstance(value, str) and value.isdigit() and len(value) < 19):
                return (
                    f"Invalid integer: {str(value)[:40]}",
                    "parameter_invalid_integer",
                    f"line_items[{i}][{name}]",
                )
    return None


@route(r"/v1/checkout/sessions", "POST")
def create_session(ex: Exchange, _m: re.Match[str]) -> None:
    params = form(ex)
    if params is None:
        return
    mode = params.get("mode")
    missing = (
        "mode" if mode is None else "line_items" if mode != "setup" and not params.get("line_items") else None
    )
    if missing:
        ex.reply(*param_error(400, f"Missing required param: {missing}.", "parameter_missing", missing))
        return
    refused = _refused_items(params["line_items"]) if "line_items" in params else None
    if refused:
        ex.reply(*param_error(400, *refused))
        return
    if mode not in _MODES:
        message = f"Invalid mode: must be one of {', '.join(_MODES)}"
        ex.reply(*param_error(400, message, "parameter_invalid_enum", "mode"))
        return
    payments = ex.fakes().payments
    key = idempotency_key(ex)
    call(ex, session_object, lambda: payments.create_checkout_session(idempotency_key=key, **params))


@route(r"/v1/checkout/sessions/(?P<id>[A-Za-z0-9_]+)", "GET")
def retrieve_session(ex: Exchange, m: re.Match[str]) -> None:
    session = stored(ex, "checkout.session", m.group("id"))
    if session is not None:
        ex.reply(200, session_object(session))


@route(r"/v1/checkout/sessions/(?P<id>[A-Za-z0-9_]+)/expire", "POST")
def expire_session(ex: Exchange, m: re.Match[str]) -> None:
    if form(ex) is None:
        return
    payments = ex.fakes().payments
    key = idempotency_key(ex)
    call(ex, session_object, lambda: payments.expire_checkout_session(m.group("id"), idempotency_key=key))
