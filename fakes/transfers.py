"""Money an agent moves out of the account: Stripe's transfers to connected accounts, their
reversals, and payouts (the operations of the Payments fake, one idempotency namespace with its
charges, as Stripe's keys are one per account).

- ``transfer``: to a connected account ``acct_...`` that exists (declared before the drill:
  ``[[stripe.accounts]]``), a new ``tr_N`` each call unless the key repeats;
- ``reverse_transfer``: partial, several per transfer until its amount is used up (as refunds
  of a charge), ``trr_N``;
- ``payout``: to the account's bank (``method`` ``standard`` or ``instant``), ``po_N``, ``pending``;
- ``cancel_payout``: a pending payout, once (``canceled``).
"""

from __future__ import annotations

from typing import Any

from killdrill.fakes.errors import FakeProviderError
from killdrill.fakes.provider import Provider
from killdrill.fakes.rules import harness_now
from killdrill.ledger import Tx
from killdrill.providers import Operation, Param

__all__ = ["PAYOUT_METHODS", "TRANSFER_OPERATIONS", "MoneyOut"]

PAYOUT_METHODS = ("standard", "instant")
_DAY = 24 * 3600

TRANSFER_OPERATIONS = (
    Operation("transfer", keyed=True),
    Operation(
        "reverse_transfer",
        keyed=True,
        undoes="transfer",
        target="transfer_id",
        params=(Param("transfer_id", "string", max_length=255), Param("amount", "integer", minimum=1)),
    ),
    Operation("payout", keyed=True),
    Operation(
        "cancel_payout",
        keyed=True,
        undoes="payout",
        target="payout_id",
        params=(Param("payout_id", "string", max_length=255),),
    ),
)


class MoneyOut(Provider):
    """Transfers, their reversals and payouts, for the Payments fake to inherit (no name: not a
    provider of its own)."""

    def transfer(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        """Send ``amount`` to the connected account ``destination``: a new ``tr_N`` unless the key
        repeats; an account nobody declared is Stripe's ``No such destination``."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            destination = str(payload.get("destination") or "")
            if (tx.get_effect(self.name, destination) or {}).get("object") != "account":
                raise FakeProviderError(
                    f"No such destination: '{destination}'", code="resource_missing", param="destination"
                )
            transfer_id = tx.next_id("tr")
            transfer = {
                "metadata": {},
                **payload,
                "id": transfer_id,
                "object": "transfer",
                "amount_reversed": 0,
                "reversed": False,
                "created": int(harness_now(tx)),
                "reversal_list": [],
            }
            tx.put_effect(self.name, transfer_id, transfer, ref=idempotency_key)
            return transfer_id, transfer

        return self._invoke("transfer", idempotency_key, payload, perform)

    def reverse_transfer(
        self, transfer_id: str, idempotency_key: str | None = None, amount: int | None = None, **details: Any
    ) -> dict[str, Any]:
        """Reverse part or all of a transfer (``amount`` None: what is left), as many times as
        wished until all of it is reversed; then, or for more than is left, a 400."""
        payload: dict[str, Any] = {"transfer_id": transfer_id, **details}
        if amount is not None:
            payload["amount"] = amount

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            transfer = tx.get_effect(self.name, transfer_id)
            if transfer is None or transfer.get("object") != "transfer":
                raise FakeProviderError(
                    f"No such transfer: '{transfer_id}'", status=404, code="resource_missing", param="id"
                )
            left = int(transfer.get("amount") or 0) - int(transfer.get("amount_reversed") or 0)
            if left <= 0:
                raise FakeProviderError(
                    f"Transfer {transfer_id} has already been fully reversed.",
                    code="transfer_already_reversed",
                )
            if amount is not None and amount > left:
                raise FakeProviderError(
                    f"You cannot reverse {amount} of transfer {transfer_id}: only {left} is left to reverse.",
                    code="amount_too_large",
                    param="amount",
                )
            given = left if amount is None else amount
            reversal_id = tx.next_id("trr")
            reversal = {
                "metadata": {},
                **details,
                "id": reversal_id,
                "object": "transfer_reversal",
                "amount": given,
                "currency": transfer.get("currency"),
                "transfer": transfer_id,
                "created": int(harness_now(tx)),
            }
            done = int(transfer.get("amount_reversed") or 0) + given
            moved = {
                **transfer,
                "amount_reversed": done,
                "reversed": done >= int(transfer.get("amount") or 0),
                "reversal_list": [*transfer.get("reversal_list", ()), reversal],
            }
            tx.update_effect(self.name, transfer_id, moved)
            tx.put_effect(self.name, reversal_id, reversal, ref=idempotency_key)
            return reversal_id, reversal

        return self._invoke("reverse_transfer", idempotency_key, payload, perform)

    def payout(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        """Pay ``amount`` out to the account's bank: a new ``po_N`` (``pending``; a standard payout
        arrives two days later, an instant one at once) unless the key repeats."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            method = payload.get("method", "standard")
            if method not in PAYOUT_METHODS:
                raise FakeProviderError(
                    f"Invalid method: must be one of {', '.join(PAYOUT_METHODS)}",
                    code="parameter_invalid_enum",
                    param="method",
                )
            now = int(harness_now(tx))
            payout_id = tx.next_id("po")
            payout = {
                "metadata": {},
                **payload,
                "id": payout_id,
                "object": "payout",
                "method": method,
                "status": "pending",
                "automatic": False,
                "created": now,
                "arrival_date": now + (0 if method == "instant" else 2 * _DAY),
            }
            tx.put_effect(self.name, payout_id, payout, ref=idempotency_key)
            return payout_id, payout

        return self._invoke("payout", idempotency_key, payload, perform)

    def cancel_payout(self, payout_id: str, idempotency_key: str | None = None) -> dict[str, Any]:
        """Cancel a payout while it is ``pending`` (the money back in the balance); then a 400."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            payout = tx.get_effect(self.name, payout_id)
            if payout is None or payout.get("object") != "payout":
                raise FakeProviderError(
                    f"No such payout: '{payout_id}'", status=404, code="resource_missing", param="id"
                )
            if payout.get("status") != "pending":
                raise FakeProviderError(
                    f"Payout {payout_id} cannot be canceled: only a pending payout can be "
                    f"(its status is {payout.get('status')}).",
                    code="payout_not_cancelable",
                )
            moved = {**payout, "status": "canceled"}
            tx.update_effect(self.name, payout_id, moved)
            return payout_id, moved

        return self._invoke("cancel_payout", idempotency_key, {"payout_id": payout_id}, perform)
