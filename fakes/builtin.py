"""The built-in fakes, one per effect class (killdrill/ARCHITECTURE.md, "Effect classes").

Each declares its operations once.
"""

from __future__ import annotations

from typing import Any

from killdrill.fakes.errors import FakeProviderError
from killdrill.fakes.provider import Provider
from killdrill.fakes.rules import harness_now
from killdrill.fakes.transfers import TRANSFER_OPERATIONS, MoneyOut
from killdrill.ledger import IN_FLIGHT, Tx
from killdrill.providers import Operation, Param

MAX_AMOUNT = 99_999_999
"""Stripe's largest amount (eight digits of the currency's smallest unit)."""
AMOUNT = Param("amount", "integer", minimum=1, maximum=MAX_AMOUNT)
ID = 255  # the longest id or key a caller sends (Stripe's bound on an idempotency key)
SESSION_LIFETIME_S = 24 * 3600
"""How long a Checkout Session stays open: Stripe's default ``expires_at``."""


class Payments(MoneyOut):
    """Stripe-like charges: keyed requests replay, mismatched reuse is refused, no key charges again
    (transfers and payouts: :class:`~killdrill.fakes.transfers.MoneyOut`)."""

    name = "payments"
    operations = (
        Operation(
            "charge",
            keyed=True,
            params=(
                Param("amount", "integer", required=True, minimum=1, maximum=MAX_AMOUNT),
                Param("currency", "string", required=True, pattern="^[A-Za-z]{3}$"),
            ),
        ),
        Operation(
            "refund",
            keyed=True,
            undoes="charge",
            target="charge_id",
            params=(Param("charge_id", "string", max_length=ID), AMOUNT),
        ),
        Operation("confirm", keyed=True, params=(Param("charge_id", "string", max_length=ID),)),
        Operation(
            "capture",
            keyed=True,
            params=(
                Param("charge_id", "string", max_length=ID),
                Param("amount_to_capture", "integer", minimum=1, maximum=MAX_AMOUNT),
            ),
        ),
        Operation("cancel", keyed=True, params=(Param("charge_id", "string", max_length=ID),)),
        Operation("create_customer", keyed=True),
        Operation("create_checkout_session", keyed=True),
        Operation(
            "expire_checkout_session", keyed=True, params=(Param("session_id", "string", max_length=ID),)
        ),
        *TRANSFER_OPERATIONS,
        Operation("lookup", read=True, params=(Param("key", "string", max_length=ID),)),
        Operation("get", read=True, params=(Param("charge_id", "string", max_length=ID),)),
    )

    def charge(
        self, idempotency_key: str | None = None, *, fence: int | None = None, **payload: Any
    ) -> dict[str, Any]:
        """``fence``: a fencing token for the idempotency key (not part of the payload)."""
        if fence is not None and idempotency_key is None:
            raise TypeError("payments.charge(fence=...) fences an idempotency key: pass one")
        data = {**payload, "object": "charge", "status": "succeeded", "refunded": False, "amount_refunded": 0}
        fenced = (idempotency_key, fence) if fence is not None and idempotency_key is not None else None
        return self._invoke(
            "charge", idempotency_key, payload, self._create("ch", data, ref=idempotency_key), fenced
        )

    def refund(
        self,
        charge_id: str,
        idempotency_key: str | None = None,
        amount: int | None = None,
        **details: Any,
    ) -> dict[str, Any]:
        """Refund part or all of a charge, as Stripe does: several refunds per charge until its
        amount is used up (``amount`` None: what is left), then ``charge_already_refunded``; more
        than is left, ``amount_too_large``.  ``details`` (``reason``, ``metadata``, ...) are kept."""
        payload: dict[str, Any] = {"charge_id": charge_id, **details}
        if amount is not None:
            payload["amount"] = amount

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            charge = tx.get_effect(self.name, charge_id)
            if charge is None or charge.get("object") != "charge":
                raise FakeProviderError(
                    f"No such charge: {charge_id!r}", code="resource_missing", param="charge"
                )
            left = refundable(charge)
            if left <= 0:
                raise FakeProviderError(
                    f"Charge {charge_id} has already been refunded.", code="charge_already_refunded"
                )
            if charge.get("captured") is False:
                raise FakeProviderError(
                    f"Charge {charge_id} has not been captured: cancel its PaymentIntent instead.",
                    code="charge_not_refundable",
                )
            if amount is not None and amount > left:
                raise FakeProviderError(
                    f"Refund amount ({_money(amount)}) is greater than unrefunded amount on charge "
                    f"({_money(left)})",
                    code="amount_too_large",
                    param="amount",
                )
            given = left if amount is None else amount
            refund_id = tx.next_id("re")
            refund = {
                **details,
                "id": refund_id,
                "object": "refund",
                "charge": charge_id,
                "amount": given,
                "currency": charge.get("currency"),
                "status": "succeeded",
            }
            done = int(charge.get("amount_refunded") or 0) + given
            total = int(charge.get("amount") or 0)
            tx.update_effect(
                self.name, charge_id, {**charge, "amount_refunded": done, "refunded": done >= total}
            )
            tx.put_effect(self.name, refund_id, refund, ref=idempotency_key)
            return refund_id, refund

        return self._invoke("refund", idempotency_key, payload, perform)

    def confirm(self, charge_id: str, idempotency_key: str | None = None, **details: Any) -> dict[str, Any]:
        """Confirm a PaymentIntent made with ``confirm=false``: it succeeds (or waits for a capture)."""

        def move(charge: dict[str, Any]) -> dict[str, Any]:
            manual = charge.get("capture_method") == "manual"
            return {
                **charge,
                "intent_status": "requires_capture" if manual else "succeeded",
                "captured": not manual,
            }

        return self._move("confirm", charge_id, idempotency_key, details, ("requires_confirmation",), move)

    def capture(
        self, charge_id: str, idempotency_key: str | None = None, amount_to_capture: int | None = None
    ) -> dict[str, Any]:
        """Capture an authorized PaymentIntent, all of it or ``amount_to_capture`` (the rest released)."""
        details = {} if amount_to_capture is None else {"amount_to_capture": amount_to_capture}

        def move(charge: dict[str, Any]) -> dict[str, Any]:
            taken = int(charge.get("amount") or 0) if amount_to_capture is None else amount_to_capture
            if taken > int(charge.get("amount") or 0):
                raise FakeProviderError(
                    "The amount to capture is greater than the amount capturable on this PaymentIntent.",
                    code="amount_too_large",
                    param="amount_to_capture",
                )
            return {**charge, "intent_status": "succeeded", "captured": True, "amount_captured": taken}

        return self._move("capture", charge_id, idempotency_key, details, ("requires_capture",), move)

    def cancel(self, charge_id: str, idempotency_key: str | None = None, **details: Any) -> dict[str, Any]:
        """Cancel a PaymentIntent not yet succeeded (an authorization is released, nothing refunded)."""

        def move(charge: dict[str, Any]) -> dict[str, Any]:
            reason = details.get("cancellation_reason")
            return {**charge, "intent_status": "canceled", "cancellation_reason": reason}

        return self._move("cancel", charge_id, idempotency_key, details, CANCELABLE, move)

    def _move(
        self,
        op: str,
        charge_id: str,
        idempotency_key: str | None,
        details: dict[str, Any],
        allowed: tuple[str, ...],
        move: Any,
    ) -> dict[str, Any]:
        """One step of a PaymentIntent's state machine (Stripe's ``payment_intent_unexpected_state``
        for a step its status does not allow)."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            charge = tx.get_effect(self.name, charge_id)
            if charge is None or charge.get("object") != "charge":
                raise FakeProviderError(f"No such payment_intent: {charge_id!r}", code="resource_missing")
            status = str(charge.get("intent_status") or "succeeded")
            if status not in allowed:
                raise FakeProviderError(
                    f"You cannot {op} this PaymentIntent because it has a status of {status}. Only a "
                    f"PaymentIntent with one of the following statuses may be {op}ed: {', '.join(allowed)}.",
                    code="payment_intent_unexpected_state",
                )
            moved = move(charge)
            tx.update_effect(self.name, charge_id, moved)
            return charge_id, moved

        return self._invoke(op, idempotency_key, {"charge_id": charge_id, **details}, perform)

    def create_customer(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        """A new customer (``cus_N``) each call, unless the key repeats."""
        data = {**payload, "object": "customer"}
        return self._invoke("create_customer", idempotency_key, payload, self._create("cus", data))

    def create_checkout_session(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        """A Checkout Session (``cs_N``): a payment page for one customer, open 24 h from its
        ``created`` (the harness clock); a new one each call unless the key repeats."""

        def perform(tx: Tx) -> tuple[str | None, dict[str, Any]]:
            now = int(harness_now(tx))
            data = {**payload, "object": "checkout.session", "status": "open", "created": now}
            return self._create("cs", {**data, "expires_at": now + SESSION_LIFETIME_S})(tx)

        return self._invoke("create_checkout_session", idempotency_key, payload, perform)

    def expire_checkout_session(self, session_id: str, idempotency_key: str | None = None) -> dict[str, Any]:
        """Close an open Checkout Session (``expired``); one that is not open is refused."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            session = tx.get_effect(self.name, session_id)
            if session is None or session.get("object") != "checkout.session":
                raise FakeProviderError(
                    f"No such checkout.session: '{session_id}'", status=404, code="resource_missing"
                )
            if session.get("status") != "open":
                raise FakeProviderError("Only Checkout Sessions with a status in [open] can be expired.")
            moved = {**session, "status": "expired"}
            tx.update_effect(self.name, session_id, moved)
            return session_id, moved

        payload = {"session_id": session_id}
        return self._invoke("expire_checkout_session", idempotency_key, payload, perform)

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The charge made under ``key``, or None if none landed (never sent, refused, in flight)."""
        state = self.ledger.key(self.name, key)
        if state is None or state.status == IN_FLIGHT or state.effect_id is None:
            return None
        return self.ledger.effect(self.name, state.effect_id)

    def get(self, charge_id: str) -> dict[str, Any] | None:
        return self.ledger.effect(self.name, charge_id)


CANCELABLE = (
    "requires_payment_method",
    "requires_capture",
    "requires_confirmation",
    "requires_action",
    "processing",
)


def refundable(charge: dict[str, Any]) -> int:
    """What is left to refund of a charge: what it captured less what its refunds took."""
    captured = charge.get("amount_captured", charge.get("amount"))
    return int(captured or 0) - int(charge.get("amount_refunded") or 0)


def _money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


class Tickets(Provider):
    """A ticketing API: every create opens a new ticket unless an idempotency key repeats."""

    name = "tickets"
    operations = (Operation("create", keyed=True),)

    def create(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        return self._invoke(
            "create", idempotency_key, payload, self._create("tkt", {**payload, "status": "open"})
        )


class Webhooks(Provider):
    """An outgoing webhook: every post is a delivery unless an idempotency key repeats."""

    name = "webhooks"
    operations = (Operation("post", keyed=True),)

    def post(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        return self._invoke(
            "post", idempotency_key, payload, self._create("wh", {**payload, "delivered": True})
        )


class Counter(Provider):
    """A counter: increment is not idempotent (an optional key is honoured)."""

    name = "counter"
    operations = (
        Operation(
            "increment",
            keyed=True,
            params=(
                Param("name", "string", max_length=ID),
                Param("by", "integer", minimum=-(2**53), maximum=2**53),
            ),
        ),
        Operation("get", read=True, params=(Param("name", "string", max_length=ID),)),
    )

    def increment(
        self, name: str, by: int = 1, idempotency_key: str | None = None, *, fence: int | None = None
    ) -> dict[str, Any]:
        """``fence``: a fencing token for this counter (a conditional update, as DynamoDB's)."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            value = tx.counter(name, by)
            effect_id = tx.next_id("inc")
            return effect_id, {"id": effect_id, "name": name, "by": by, "value": value}

        fenced = (name, fence) if fence is not None else None
        return self._invoke("increment", idempotency_key, {"name": name, "by": by}, perform, fenced)

    def get(self, name: str) -> int:
        return self.ledger.counter_value(name)


class KV(Provider):
    """An idempotent store: ``set`` converges; its final state goes into the snapshot."""

    name = "kv"
    operations = (
        Operation("set", params=(Param("key", "string", max_length=ID),)),
        Operation("get", read=True, params=(Param("key", "string", max_length=ID),)),
    )
    convergent = True

    def set(self, key: str, value: Any, *, fence: int | None = None) -> dict[str, Any]:
        """``fence``: a fencing token for this key (a compare-and-set, as etcd's or ZooKeeper's)."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            tx.kv_set(key, value)
            return key, {"key": key, "value": value}

        fenced = (key, fence) if fence is not None else None
        return self._invoke("set", None, {"key": key, "value": value}, perform, fenced)

    def get(self, key: str, default: Any = None) -> Any:
        return self.ledger.kv_get(key, default)


class Mailbox(Provider):
    """Irreversible delivery: every send is a message, nothing dedupes; ``lookup(ref)`` reconciles."""

    name = "mailbox"
    operations = (
        Operation(
            "send",
            params=(
                Param("to", "string", max_length=320),  # the longest email address (RFC 3696)
                Param("subject", "string", max_length=998),  # the longest header line (RFC 5322)
                Param("ref", "string", max_length=ID),
            ),
        ),
        Operation("lookup", read=True, params=(Param("ref", "string", max_length=ID),)),
    )

    def send(self, *, to: str, subject: str, body: str, ref: str | None = None) -> dict[str, Any]:
        payload = {"to": to, "subject": subject, "body": body, "ref": ref}
        return self._invoke(
            "send", None, payload, self._create("msg", {**payload, "delivered": True}, ref=ref)
        )

    def lookup(self, ref: str) -> dict[str, Any] | None:
        """The first message delivered with client reference ``ref`` (with ``deliveries``), or None."""
        messages = self.ledger.effects(self.name, ref=ref)
        return {**messages[0], "deliveries": len(messages)} if messages else None


class Inventory(Provider):
    """A partner API with no key header: reserve and release happen every time they are called."""

    name = "inventory"
    operations = (
        Operation(
            "reserve",
            params=(
                Param("sku", "string", max_length=ID),
                Param("qty", "integer", minimum=1, maximum=1_000_000),
                Param("ref", "string", max_length=ID),
            ),
        ),
        Operation(
            "release",
            undoes="reserve",
            target="reservation_id",
            params=(Param("reservation_id", "string", max_length=ID),),
        ),
        Operation("get", read=True, params=(Param("reservation_id", "string", max_length=ID),)),
    )

    def reserve(self, sku: str, qty: int, ref: str | None = None) -> dict[str, Any]:
        data = {"sku": sku, "qty": qty, "ref": ref, "status": "reserved", "releases": 0}
        return self._invoke(
            "reserve", None, {"sku": sku, "qty": qty, "ref": ref}, self._create("res", data, ref=ref)
        )

    def release(self, reservation_id: str) -> dict[str, Any]:
        """Release a reservation.  A second release is executed (and recorded) again: a duplicate."""

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            res = tx.get_effect(self.name, reservation_id)
            if res is None:
                raise FakeProviderError(f"No such reservation: {reservation_id!r}", code="resource_missing")
            res = {**res, "status": "released", "releases": int(res.get("releases", 0)) + 1}
            tx.update_effect(self.name, reservation_id, res)
            return reservation_id, res

        return self._invoke("release", None, {"reservation_id": reservation_id}, perform)

    def get(self, reservation_id: str) -> dict[str, Any] | None:
        return self.ledger.effect(self.name, reservation_id)
