"""Stripe's PaymentIntent steps and customers, on the Payments fake (one idempotency namespace
with charges and refunds, as Stripe's keys are one per account).

- ``POST /v1/payment_intents/{id}/confirm``, ``/capture`` (``amount_to_capture``), ``/cancel``
  (``cancellation_reason``): ``payments.confirm|capture|cancel``; a step the PaymentIntent's
  status does not allow is Stripe's 400 ``payment_intent_unexpected_state`` (a second capture, a
  cancel after success, a confirm of a succeeded one);
- ``POST /v1/customers`` (``payments.create_customer``; ``cus_N``, a new one per call unless the
  key repeats) and ``GET /v1/customers/{id}``.
"""

from __future__ import annotations

import re
import time
from typing import Any

from killdrill.fakes.wire import Exchange, route
from killdrill.fakes.wire.stripe import call, charge_id, form, idempotency_key, payment_intent, stored

__all__: list[str] = []


@route(r"/v1/payment_intents/(?P<id>[A-Za-z0-9_]+)/(?P<step>confirm|capture|cancel)", "POST")
def step(ex: Exchange, m: re.Match[str]) -> None:
    params = form(ex)
    if params is None:
        return
    payments = ex.fakes().payments
    target = charge_id(m.group("id"))
    if stored(ex, "payment_intent", m.group("id"), kind="charge", at=target) is None:
        return
    method = getattr(payments, m.group("step"))
    key = idempotency_key(ex)
    call(ex, payment_intent, lambda: method(target, idempotency_key=key, **params))


@route(r"/v1/customers", "POST")
def create_customer(ex: Exchange, _m: re.Match[str]) -> None:
    params = form(ex)
    if params is not None:
        payments = ex.fakes().payments
        call(
            ex,
            customer_object,
            lambda: payments.create_customer(idempotency_key=idempotency_key(ex), **params),
        )


@route(r"/v1/customers/(?P<id>[A-Za-z0-9_]+)", "GET")
def retrieve_customer(ex: Exchange, m: re.Match[str]) -> None:
    customer = stored(ex, "customer", m.group("id"))
    if customer is not None:
        ex.reply(200, customer_object(customer))


def customer_object(customer: dict[str, Any]) -> dict[str, Any]:
    """Render a customer as Stripe sends one: every field present, null or empty when unset."""
    body = {"balance": 0, "delinquent": False, "livemode": False, "metadata": {}, **customer}
    body.setdefault("created", int(time.time()))
    for name in (
        "email",
        "name",
        "phone",
        "description",
        "address",
        "shipping",
        "currency",
        "default_source",
    ):
        body.setdefault(name, None)
    return body
