"""The built-in fakes, one per effect class (killdrill/ARCHITECTURE.md, "Effect classes").

Each declares its operations once.
"""

from __future__ import annotations

from typing import Any

from killdrill.fakes.errors import FakeProviderError
from killdrill.fakes.provider import Provider
from killdrill.ledger import IN_FLIGHT, Tx
from killdrill.providers import Operation


class Payments(Provider):
    """Stripe-like charges: keyed requests replay, mismatched reuse is refused, no key charges again."""

    name = "payments"
    operations = (
        Operation("charge", keyed=True),
        Operation("refund", keyed=True, undoes="charge", target="charge_id"),
        Operation("lookup", read=True),
        Operation("get", read=True),
    )

    def charge(
        self, idempotency_key: str | None = None, *, fence: int | None = None, **payload: Any
    ) -> dict[str, Any]:
        """``fence``: a fencing token for the idempotency key (not part of the payload)."""
        if fence is not None and idempotency_key is None:
            raise TypeError("payments.charge(fence=...) fences an idempotency key: pass one")
        data = {**payload, "object": "charge", "status": "succeeded", "refunded": False}
        fenced = (idempotency_key, fence) if fence is not None and idempotency_key is not None else None
        return self._invoke(
            "charge", idempotency_key, payload, self._create("ch", data, ref=idempotency_key), fenced
        )

    def refund(
        self, charge_id: str, idempotency_key: str | None = None, amount: int | None = None
    ) -> dict[str, Any]:
        """Refund a charge once; a second refund of the same charge is refused as Stripe does."""
        payload: dict[str, Any] = {"charge_id": charge_id}
        if amount is not None:
            payload["amount"] = amount

        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            charge = tx.get_effect(self.name, charge_id)
            if charge is None or charge.get("object") != "charge":
                raise FakeProviderError(
                    f"No such charge: {charge_id!r}", code="resource_missing", param="charge"
                )
            if charge.get("refunded"):
                raise FakeProviderError(
                    f"Charge {charge_id} has already been refunded.", code="charge_already_refunded"
                )
            refund_id = tx.next_id("re")
            refund = {
                "id": refund_id,
                "object": "refund",
                "charge": charge_id,
                "amount": amount if amount is not None else charge.get("amount"),
                "status": "succeeded",
            }
            tx.update_effect(self.name, charge_id, {**charge, "refunded": True, "refund": refund_id})
            tx.put_effect(self.name, refund_id, refund, ref=idempotency_key)
            return refund_id, refund

        return self._invoke("refund", idempotency_key, payload, perform)

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The charge made under ``key``, or None if none landed (never sent, refused, in flight)."""
        state = self.ledger.key(self.name, key)
        if state is None or state.status == IN_FLIGHT or state.effect_id is None:
            return None
        return self.ledger.effect(self.name, state.effect_id)

    def get(self, charge_id: str) -> dict[str, Any] | None:
        return self.ledger.effect(self.name, charge_id)


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
    operations = (Operation("increment", keyed=True), Operation("get", read=True))

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
    operations = (Operation("set"), Operation("get", read=True))
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
    operations = (Operation("send"), Operation("lookup", read=True))

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
        Operation("reserve"),
        Operation("release", undoes="reserve", target="reservation_id"),
        Operation("get", read=True),
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
