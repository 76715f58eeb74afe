"""Stripe's transfers, transfer reversals and payouts, on the Payments fake
(:mod:`killdrill.fakes.transfers`), form-encoded as the SDK sends them, under Stripe's key rules.

- ``POST /v1/transfers`` (``payments.transfer``; ``tr_N``): ``amount``, ``currency`` and
  ``destination`` required (``parameter_missing``); the destination a connected account declared
  before the drill (``[[stripe.accounts]]``), else 400 ``No such destination``;
  ``GET /v1/transfers/{id}`` (its ``reversals`` a list, as Stripe embeds them);
- ``POST /v1/transfers/{id}/reversals`` (``payments.reverse_transfer``; ``trr_N``): partial until
  the transfer is used up; ``GET /v1/transfers/{id}/reversals/{rid}``;
- ``POST /v1/payouts`` (``payments.payout``; ``po_N``, ``pending``), ``GET /v1/payouts/{id}``,
  ``POST /v1/payouts/{id}/cancel`` (``payments.cancel_payout``) while pending.

Where it differs: no balance (Stripe refuses a transfer or payout the balance cannot cover,
``balance_insufficient``), a payout stays ``pending`` (never ``in_transit`` or ``paid``) and its
``destination`` is the one given, else null (Stripe: the default bank account).
"""

from __future__ import annotations

import re
from typing import Any

from killdrill.fakes.wire import Exchange, route
from killdrill.fakes.wire.stripe import call, form, idempotency_key, required, stored

__all__ = ["payout_object", "reversal_object", "transfer_object"]

_ID = r"[A-Za-z0-9_]+"


def _nulls(body: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        body.setdefault(name, None)
    return body


def reversal_object(reversal: dict[str, Any]) -> dict[str, Any]:
    """A reversal as Stripe sends one (``transfer_reversal``), its unset fields null."""
    return _nulls(dict(reversal), "balance_transaction", "destination_payment_refund", "source_refund")


def transfer_object(transfer: dict[str, Any]) -> dict[str, Any]:
    """A transfer as Stripe sends one, with its reversals as Stripe's embedded list."""
    body = {k: v for k, v in transfer.items() if k != "reversal_list"}
    data = [reversal_object(r) for r in transfer.get("reversal_list") or ()]
    url = f"/v1/transfers/{transfer['id']}/reversals"
    body["reversals"] = {
        "object": "list",
        "data": data,
        "has_more": False,
        "total_count": len(data),
        "url": url,
    }
    body.update(livemode=False, source_type=body.get("source_type") or "card")
    return _nulls(
        body,
        "description",
        "transfer_group",
        "balance_transaction",
        "destination_payment",
        "source_transaction",
    )


def payout_object(payout: dict[str, Any]) -> dict[str, Any]:
    """A payout as Stripe sends one, its unset fields null."""
    body = {"livemode": False, "type": "bank_account", "source_type": "card", **payout}
    body.setdefault("reconciliation_status", "not_applicable")
    return _nulls(
        body,
        "description",
        "destination",
        "statement_descriptor",
        "balance_transaction",
        "failure_balance_transaction",
        "failure_code",
        "failure_message",
        "original_payout",
        "reversed_by",
    )


@route(r"/v1/transfers", "POST")
def create_transfer(ex: Exchange, _m: re.Match[str]) -> None:
    params = form(ex)
    if params is not None and required(ex, params, "amount", "currency", "destination"):
        payments = ex.fakes().payments
        key = idempotency_key(ex)
        call(ex, transfer_object, lambda: payments.transfer(idempotency_key=key, **params))


@route(rf"/v1/transfers/(?P<id>{_ID})", "GET")
def retrieve_transfer(ex: Exchange, m: re.Match[str]) -> None:
    transfer = stored(ex, "transfer", m.group("id"))
    if transfer is not None:
        ex.reply(200, transfer_object(transfer))


@route(rf"/v1/transfers/(?P<id>{_ID})/reversals", "POST")
def create_reversal(ex: Exchange, m: re.Match[str]) -> None:
    params = form(ex)
    if params is None:
        return
    payments = ex.fakes().payments
    key, amount = idempotency_key(ex), params.pop("amount", None)
    call(
        ex,
        reversal_object,
        lambda: payments.reverse_transfer(m.group("id"), idempotency_key=key, amount=amount, **params),
    )


@route(rf"/v1/transfers/(?P<id>{_ID})/reversals/(?P<rid>{_ID})", "GET")
def retrieve_reversal(ex: Exchange, m: re.Match[str]) -> None:
    reversal = stored(ex, "transfer_reversal", m.group("rid"), of=("transfer", m.group("id")))
    if reversal is not None:
        ex.reply(200, reversal_object(reversal))


@route(r"/v1/payouts", "POST")
def create_payout(ex: Exchange, _m: re.Match[str]) -> None:
    params = form(ex)
    if params is not None and required(ex, params, "amount", "currency"):
        payments = ex.fakes().payments
        key = idempotency_key(ex)
        call(ex, payout_object, lambda: payments.payout(idempotency_key=key, **params))


@route(rf"/v1/payouts/(?P<id>{_ID})", "GET")
def retrieve_payout(ex: Exchange, m: re.Match[str]) -> None:
    payout = stored(ex, "payout", m.group("id"))
    if payout is not None:
        ex.reply(200, payout_object(payout))


@route(rf"/v1/payouts/(?P<id>{_ID})/cancel", "POST")
def cancel_payout(ex: Exchange, m: re.Match[str]) -> None:
    if form(ex) is None:
        return
    payments = ex.fakes().payments
    key = idempotency_key(ex)
    call(ex, payout_object, lambda: payments.cancel_payout(m.group("id"), idempotency_key=key))
