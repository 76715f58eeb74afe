"""Stripe, as its idempotency documentation describes it (docs.stripe.com/api/idempotent_requests).

Served: ``POST /v1/payment_intents`` (recorded as ``payments.charge``; ids ``pi_...``, the charge
``ch_...`` as ``latest_charge``), ``GET /v1/payment_intents/{id}``, the legacy ``POST /v1/charges``
(``stripe.Charge.create``, also ``payments.charge``; ids ``ch_...``) and ``GET /v1/charges/{id}``,
and ``POST /v1/refunds`` (``payments.refund``; ``payment_intent`` or ``charge``), form-encoded as the
SDK sends them.  The rules, one test each in ``tests/unit/fakes/wire/test_stripe.py``:

- ``Idempotency-Key`` up to 255 characters (longer: 400, nothing happens);
- a key is remembered 24 h on the harness clock (:func:`killdrill.fakes.advance_clock`);
- same key, other parameters: 400 ``idempotency_error``; key still executing: 409
  ``idempotency_key_in_use`` (with ``Stripe-Should-Retry: true``);
- the response is saved once execution began, 500s included, but not a 429 or a validation error;
- a replay carries ``Idempotent-Replayed: true``; errors carry ``Stripe-Should-Retry``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from killdrill.fakes import FakeProviderError
from killdrill.fakes.wire import Exchange, route, stripe_error, stripe_render

__all__ = ["MAX_KEY_LENGTH", "charge_object", "decode_form", "payment_intent"]

MAX_KEY_LENGTH = 255
_INT_FIELDS = {"amount", "application_fee_amount"}


def decode_form(body: str) -> dict[str, Any]:
    """Stripe's form encoding (``metadata[order]=7``, ``payment_method_types[0]=card``) to JSON values."""
    out: dict[str, Any] = {}
    for name, value in parse_qsl(body, keep_blank_values=True):
        parts = [name.split("[", 1)[0], *re.findall(r"\[([^\]]*)\]", name)]
        node = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "":  # "expand[]": append
                part = str(sum(1 for k in node if k.isdigit()))
            if last:
                node[part] = int(value) if part in _INT_FIELDS and value.lstrip("-").isdigit() else value
            else:
                child = node.setdefault(part, {})
                if not isinstance(child, dict):
                    raise ValueError(f"{name!r} nests into the plain value of {part!r}")
                node = child
    return {k: _lists(v) for k, v in out.items()}  # numbered keys below the top level are lists


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        value = {k: _lists(v) for k, v in value.items()}
        if value and all(k.isdigit() for k in value):
            return [value[k] for k in sorted(value, key=int)]
    return value


def _intent_id(charge_id: str) -> str:
    """A PaymentIntent's id of the fake's charge ``ch_N``: ``pi_N``, as Stripe's ids read."""
    return "pi_" + charge_id.removeprefix("ch_")


def _charge_id(any_id: str) -> str:
    """The fake's charge id of a PaymentIntent id ``pi_N`` (a ``ch_`` id as it is)."""
    return "ch_" + any_id.removeprefix("pi_") if any_id.startswith("pi_") else any_id


def charge_object(charge: dict[str, Any]) -> dict[str, Any]:
    """Render a charge the fake made as a Stripe Charge (``stripe.Charge.create``)."""
    body = {k: v for k, v in charge.items() if k not in ("refund",)}
    body.update(object="charge", status="succeeded", paid=True, livemode=False)
    body.setdefault("created", int(time.time()))
    body.setdefault("metadata", {})
    return body


def payment_intent(charge: dict[str, Any]) -> dict[str, Any]:
    """Render a charge the fake made as a Stripe PaymentIntent (the SDK needs ``object``)."""
    body = {k: v for k, v in charge.items() if k not in ("object", "refunded", "refund")}
    body.update(
        object="payment_intent",
        id=_intent_id(charge["id"]),
        latest_charge=charge["id"],
        status="succeeded",
        livemode=False,
        amount_received=charge.get("amount"),
    )
    body.setdefault("created", int(time.time()))
    body.setdefault("metadata", {})
    return body


def _key(ex: Exchange) -> str | None:
    return ex.header("Idempotency-Key")


def _form(ex: Exchange) -> dict[str, Any] | None:
    """The form-encoded body, or None after answering 400 (not UTF-8, or a field nested into a value)."""
    try:
        return decode_form(ex.raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        ex.reply(*stripe_error(400, f"the body must be form-encoded UTF-8: {exc}"))
        return None


def _refused(ex: Exchange) -> bool:
    key = _key(ex)
    if key is not None and len(key) > MAX_KEY_LENGTH:
        ex.reply(*stripe_error(400, f"Idempotency-Key must be at most {MAX_KEY_LENGTH} characters long."))
        return True
    return False


def _call(ex: Exchange, resource: Callable[[dict[str, Any]], Any], method: Callable[[], Any]) -> None:
    """Run one of the Payments fake's operations as the server runs it (Stripe's key rules)."""
    try:
        answer, _ = ex.fakes().serve(method)
    except (TypeError, FakeProviderError) as exc:
        ex.reply(*stripe_error(400, str(exc)))
        return
    if answer is not None:
        ex.finish(answer, stripe_render(_key(ex), resource))


@route(r"/v1/payment_intents", "POST")
def create_payment_intent(ex: Exchange, _m: re.Match[str]) -> None:
    params = None if _refused(ex) else _form(ex)
    if params is not None:
        payments = ex.fakes().payments
        _call(ex, payment_intent, lambda: payments.charge(idempotency_key=_key(ex), **params))


@route(r"/v1/charges", "POST")
def create_charge(ex: Exchange, _m: re.Match[str]) -> None:
    """``stripe.Charge.create``: the same ``payments.charge`` effect, rendered as a Charge."""
    params = None if _refused(ex) else _form(ex)
    if params is not None:
        payments = ex.fakes().payments
        _call(ex, charge_object, lambda: payments.charge(idempotency_key=_key(ex), **params))


@route(r"/v1/charges/(?P<id>[A-Za-z0-9_]+)", "GET")
def retrieve_charge(ex: Exchange, m: re.Match[str]) -> None:
    charge = ex.fakes().payments.get(m.group("id"))
    if charge is None or charge.get("object") != "charge":
        ex.reply(*stripe_error(404, f"No such charge: '{m.group('id')}'", code="resource_missing"))
        return
    ex.reply(200, charge_object(charge))


@route(r"/v1/payment_intents/(?P<id>[A-Za-z0-9_]+)", "GET")
def retrieve_payment_intent(ex: Exchange, m: re.Match[str]) -> None:
    charge = ex.fakes().payments.get(_charge_id(m.group("id")))
    if charge is None or charge.get("object") != "charge":
        ex.reply(*stripe_error(404, f"No such payment_intent: '{m.group('id')}'", code="resource_missing"))
        return
    ex.reply(200, payment_intent(charge))


@route(r"/v1/refunds", "POST")
def create_refund(ex: Exchange, _m: re.Match[str]) -> None:
    params = None if _refused(ex) else _form(ex)
    if params is None:
        return
    target = params.get("payment_intent") or params.get("charge")
    if not isinstance(target, str):
        ex.reply(*stripe_error(400, "Missing required param: payment_intent."))
        return
    amount = params.get("amount") if isinstance(params.get("amount"), int) else None
    payments = ex.fakes().payments
    charge_id = _charge_id(target)
    _call(ex, dict, lambda: payments.refund(charge_id, idempotency_key=_key(ex), amount=amount))
