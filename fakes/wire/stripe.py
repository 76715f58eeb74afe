"""Stripe, as its idempotency documentation describes it (docs.stripe.com/api/idempotent_requests).

Served: ``POST /v1/payment_intents`` (recorded as ``payments.charge``; ids ``pi_...``, the charge
``ch_...`` as ``latest_charge``), ``GET /v1/payment_intents/{id}``, the legacy ``POST /v1/charges``
(``stripe.Charge.create``, also ``payments.charge``; ids ``ch_...``) and ``GET /v1/charges/{id}``,
and ``POST /v1/refunds`` (``payments.refund``; ``payment_intent`` or ``charge``; partial, several
per charge up to its amount), form-encoded as the SDK sends them; PaymentIntents' confirm, capture
and cancel and customers are in :mod:`killdrill.fakes.wire.stripe_objects`.  The rules, one test
each in ``tests/unit/fakes/wire/test_stripe.py`` and ``test_stripe_objects.py``:

- ``Idempotency-Key`` up to 255 characters (longer: 400, nothing happens);
- a key is remembered 24 h on the harness clock (:func:`killdrill.fakes.advance_clock`);
- same key, other parameters: 400 ``idempotency_error``; key still executing: 409
  ``idempotency_key_in_use`` (with ``Stripe-Should-Retry: true``);
- the response is saved once execution began, 500s included, but not a 429 or a validation error;
- a replay carries ``Idempotent-Replayed: true``; errors carry ``Stripe-Should-Retry``;
- a body Stripe refuses is a 400 in Stripe's error shape, never a 500: a JSON body, an integer
  field that is not a positive integer (``parameter_invalid_integer``), a parameter nested deeper
  than Stripe's forms go (``MAX_DEPTH``), metadata whose value is not a string.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from killdrill.fakes import FakeProviderError
from killdrill.fakes.wire import Exchange, route, stripe_error, stripe_render

__all__ = [
    "MAX_DEPTH",
    "MAX_KEY_LENGTH",
    "call",
    "charge_id",
    "charge_object",
    "decode_form",
    "form",
    "idempotency_key",
    "param_error",
    "payment_intent",
    "refund_object",
]

MAX_KEY_LENGTH = 255
MAX_DEPTH = 8
"""Brackets one form parameter may nest (Stripe's deepest are a few: ``payment_method_data[billing_
details][address][line1]``); deeper is refused before it is built."""
_INT_FIELDS = {"amount", "application_fee_amount", "amount_to_capture"}
_JSON_BODY = (
    "Invalid request (check that your POST content type is application/x-www-form-urlencoded). "
    "If you have any questions, we can help at https://support.stripe.com/."
)


class FormError(ValueError):
    """A body Stripe refuses (400), with the parameter it names and Stripe's error code."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def decode_form(body: str) -> dict[str, Any]:
    """Stripe's form encoding (``metadata[order]=7``, ``payment_method_types[0]=card``) to JSON values."""
    out: dict[str, Any] = {}
    for name, value in parse_qsl(body, keep_blank_values=True):
        if name.count("[") > MAX_DEPTH:
            raise FormError(f"Invalid parameter: {name[:60]}... is nested too deeply.", param=name[:60])
        parts = [name.split("[", 1)[0], *re.findall(r"\[([^\]]*)\]", name)]
        node = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "":  # "expand[]": append (its siblings are numbered too)
                part = str(len(node))
            if last:
                node[part] = _integer(name, value) if i == 0 and part in _INT_FIELDS else value
            else:
                child = node.setdefault(part, {})
                if not isinstance(child, dict):
                    raise FormError(f"Invalid parameter: {name!r} nests into the plain value of {part!r}.")
                node = child
    for k, v in (out.get("metadata") or {}).items():
        if not isinstance(v, str):
            raise FormError("Invalid metadata: metadata values must be strings.", f"metadata[{k}]")
    return {k: _lists(v) for k, v in out.items()}  # numbered keys below the top level are lists


def _integer(name: str, value: str) -> int:
    """An amount as Stripe reads it: a positive whole number, else ``parameter_invalid_integer``."""
    if not value.isdigit() or len(value) > 18:
        raise FormError(f"Invalid integer: {value[:40]}", name, "parameter_invalid_integer")
    if int(value) < 1:
        raise FormError("Invalid positive integer", name, "parameter_invalid_integer")
    return int(value)


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        value = {k: _lists(v) for k, v in value.items()}
        if value and all(k.isdigit() for k in value):
            return [value[k] for k in sorted(value, key=int)]
    return value


def _intent_id(charge: str) -> str:
    """A PaymentIntent's id of the fake's charge ``ch_N``: ``pi_N``, as Stripe's ids read."""
    return "pi_" + charge.removeprefix("ch_")


def charge_id(any_id: str) -> str:
    """The fake's charge id of a PaymentIntent id ``pi_N`` (a ``ch_`` id as it is)."""
    return "ch_" + any_id.removeprefix("pi_") if any_id.startswith("pi_") else any_id


def charge_object(charge: dict[str, Any]) -> dict[str, Any]:
    """Render a charge the fake made as a Stripe Charge (``stripe.Charge.create``)."""
    body = {k: v for k, v in charge.items() if k not in ("refund", "intent_status", "capture_method")}
    body.setdefault("amount_refunded", 0)
    body.setdefault("captured", True)
    body.setdefault("amount_captured", body.get("amount") if body["captured"] else 0)
    body.update(object="charge", status="succeeded", paid=True, livemode=False)
    body.setdefault("payment_intent", _intent_id(charge["id"]))
    body.setdefault("created", int(time.time()))
    body.setdefault("metadata", {})
    return _nullable(body, "customer", "description", "receipt_email", "failure_code", "failure_message")


def _nullable(body: dict[str, Any], *names: str) -> dict[str, Any]:
    """``body`` with each of ``names`` present, null when unset: Stripe sends every field of an
    object, so an SDK's ``refund.reason`` is None, never an AttributeError."""
    for name in names:
        body.setdefault(name, None)
    return body


def refund_object(refund: dict[str, Any]) -> dict[str, Any]:
    """Render a refund the fake made as a Stripe Refund: with its ``payment_intent`` (the fake's
    charge ``ch_X`` is PaymentIntent ``pi_X``), ``created``, ``metadata`` and Stripe's nulls."""
    body = dict(refund)
    body.setdefault(
        "payment_intent", _intent_id(str(refund.get("charge") or "")) if refund.get("charge") else None
    )
    body.setdefault("created", int(time.time()))
    body.setdefault("metadata", {})
    return _nullable(body, "reason", "description", "balance_transaction", "receipt_number", "failure_reason")


def payment_intent(charge: dict[str, Any]) -> dict[str, Any]:
    """Render a charge the fake made as a Stripe PaymentIntent (the SDK needs ``object``): its
    ``status`` is the charge's ``intent_status`` (``succeeded`` unless confirm, capture or cancel
    moved it), ``latest_charge`` the charge's id."""
    hidden = (
        "object",
        "refunded",
        "refund",
        "amount_refunded",
        "captured",
        "amount_captured",
        "intent_status",
    )
    body = {k: v for k, v in charge.items() if k not in hidden}
    status = str(charge.get("intent_status") or "succeeded")
    body.update(
        object="payment_intent",
        id=_intent_id(charge["id"]),
        latest_charge=charge["id"] if status in ("succeeded", "requires_capture", "canceled") else None,
        status=status,
        livemode=False,
        amount_received=charge.get("amount_captured", charge.get("amount")) if status == "succeeded" else 0,
        amount_capturable=charge.get("amount") if status == "requires_capture" else 0,
    )
    body.setdefault("capture_method", "automatic")
    body.setdefault("created", int(time.time()))
    body.setdefault("metadata", {})
    body.setdefault("client_secret", f"{body['id']}_secret_killdrill")
    body.setdefault("payment_method_types", ["card"])
    body.setdefault("confirmation_method", "automatic")
    fields = ("customer", "description", "payment_method", "receipt_email", "canceled_at")
    return _nullable(body, *fields, "cancellation_reason", "last_payment_error", "next_action")


def idempotency_key(ex: Exchange) -> str | None:
    return ex.header("Idempotency-Key")


def form(ex: Exchange) -> dict[str, Any] | None:
    """The form-encoded body, or None after answering 400 as Stripe does (a JSON body, not UTF-8,
    a parameter Stripe refuses)."""
    if _refused(ex):
        return None
    content_type = (ex.header("Content-Type") or "").lower()
    if "json" in content_type or ex.raw.lstrip()[:1] in (b"{", b"["):
        ex.reply(*stripe_error(400, _JSON_BODY))
        return None
    try:
        return decode_form(ex.raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        ex.reply(*stripe_error(400, f"the body must be form-encoded UTF-8: {exc}"))
    except FormError as exc:
        ex.reply(*param_error(400, str(exc), exc.code, exc.param))
    return None


def param_error(status: int, message: str, code: str | None, param: str | None) -> Any:
    """Stripe's error body naming the parameter it refuses."""
    status, body, headers = stripe_error(status, message, code)
    body["error"]["param"] = param
    return status, body, headers


def _refused(ex: Exchange) -> bool:
    """True after answering 400 for a key longer than Stripe takes."""
    key = idempotency_key(ex)
    if key is not None and len(key) > MAX_KEY_LENGTH:
        ex.reply(*stripe_error(400, f"Idempotency-Key must be at most {MAX_KEY_LENGTH} characters long."))
        return True
    return False


def call(ex: Exchange, resource: Callable[[dict[str, Any]], Any], method: Callable[[], Any]) -> None:
    """Run one of the Payments fake's operations as the server runs it (Stripe's key rules); a
    refusal is Stripe's error body with its code and param."""
    try:
        answer, _ = ex.fakes().serve(method)
    except FakeProviderError as exc:
        ex.reply(*param_error(exc.status, exc.message, exc.code, exc.param))
        return
    except TypeError as exc:
        ex.reply(*stripe_error(400, str(exc)))
        return
    if answer is not None:
        ex.finish(answer, stripe_render(idempotency_key(ex), resource))


@route(r"/v1/payment_intents", "POST")
def create_payment_intent(ex: Exchange, _m: re.Match[str]) -> None:
    params = form(ex)
    if params is not None and required(ex, params, "amount", "currency"):
        payments = ex.fakes().payments
        call(
            ex,
            payment_intent,
            lambda: payments.charge(idempotency_key=idempotency_key(ex), **_intent_state(params)),
        )


@route(r"/v1/charges", "POST")
def create_charge(ex: Exchange, _m: re.Match[str]) -> None:
    """``stripe.Charge.create``: the same ``payments.charge`` effect, rendered as a Charge."""
    params = form(ex)
    if params is not None and required(ex, params, "amount", "currency"):
        payments = ex.fakes().payments
        call(ex, charge_object, lambda: payments.charge(idempotency_key=idempotency_key(ex), **params))


@route(r"/v1/charges/(?P<id>[A-Za-z0-9_]+)", "GET")
def retrieve_charge(ex: Exchange, m: re.Match[str]) -> None:
    charge = stored(ex, "charge", m.group("id"))
    if charge is not None:
        ex.reply(200, charge_object(charge))


@route(r"/v1/payment_intents/(?P<id>[A-Za-z0-9_]+)", "GET")
def retrieve_payment_intent(ex: Exchange, m: re.Match[str]) -> None:
    charge = stored(ex, "payment_intent", m.group("id"), kind="charge", at=charge_id(m.group("id")))
    if charge is None:
        return
    intent = payment_intent(charge)
    if "latest_charge" in decode_form(ex.query).get("expand", ()) and intent["latest_charge"]:
        intent["latest_charge"] = charge_object(charge)
    ex.reply(200, intent)


@route(r"/v1/refunds", "POST")
def create_refund(ex: Exchange, _m: re.Match[str]) -> None:
    params = form(ex)
    if params is None:
        return
    by = "payment_intent" if "payment_intent" in params else "charge"
    target = params.pop(by, None)
    if not isinstance(target, str) or not target:
        ex.reply(*param_error(400, "Missing required param: charge.", "parameter_missing", "charge"))
        return
    payments = ex.fakes().payments
    amount = params.pop("amount", None)
    call(
        ex,
        refund_object,
        lambda: payments.refund(
            charge_id(target), idempotency_key=idempotency_key(ex), amount=amount, **params
        ),
    )


@route(r"/v1/refunds/(?P<id>re_[A-Za-z0-9_]+)", "GET")
def retrieve_refund(ex: Exchange, m: re.Match[str]) -> None:
    refund = stored(ex, "refund", m.group("id"))
    if refund is not None:
        ex.reply(200, refund_object(refund))


def required(ex: Exchange, params: dict[str, Any], *names: str) -> bool:
    """False after answering Stripe's ``parameter_missing`` for the first of ``names`` not given."""
    for name in names:
        if name not in params:
            ex.reply(*param_error(400, f"Missing required param: {name}.", "parameter_missing", name))
            return False
    return True


def stored(
    ex: Exchange, name: str, oid: str, *, kind: str = "", at: str = "", of: tuple[str, str] = ("", "")
) -> dict[str, Any] | None:
    """The object ``oid`` as stored (at ``at``: a PaymentIntent's is its charge's) if it is a
    ``kind`` (``name``) and its field ``of[0]`` is ``of[1]`` (a reversal of that transfer); else
    None once Stripe's 404 ``No such NAME: 'OID'`` is answered."""
    found = ex.fakes().payments.get(at or oid) or {}
    if found.get("object") != (kind or name) or (of[0] and found.get(of[0]) != of[1]):
        ex.reply(*stripe_error(404, f"No such {name}: '{oid}'", code="resource_missing"))
        return None
    return found


def _intent_state(params: dict[str, Any]) -> dict[str, Any]:
    """A PaymentIntent's payload with the state its create leaves it in: ``capture_method=manual``
    authorizes (``requires_capture``), ``confirm=false`` waits for a confirm; else ``succeeded``."""
    if params.get("confirm") == "false":
        return {**params, "intent_status": "requires_confirmation", "captured": False}
    if params.get("capture_method") == "manual":
        return {**params, "intent_status": "requires_capture", "captured": False}
    return params
