"""State that exists before the drill: the objects an agent expects to find (``--existing FILE``).

The file (JSON, or TOML when its name ends ``.toml``) declares objects by provider; the drill
puts them into the ledger of every run (each clean run of discovery and each case, before its
first attempt) under the ids the user chose.  They are state, not calls: the verdict counts
calls, so an existing object is never an effect of the agent, and a refund of an existing
charge is judged like any other effect::

    [[stripe.payment_intents]]          # a PaymentIntent paid before the drill (its charge ch_...)
    id = "pi_refundable_1"
    amount = 10000
    currency = "usd"

    [[stripe.charges]]                  # a legacy charge; stripe.customers: {id = "cus_...", ...}
    id = "ch_legacy_1"
    amount = 5000
    currency = "usd"

    [[stripe.accounts]]                 # a connected account to transfer to (POST /v1/transfers)
    id = "acct_seller_7"

    [[razorpay.payments]]               # a captured Razorpay payment to refund (currency INR)
    id = "pay_order_7"
    amount = 50000

    [[gocardless.payments]]             # a GoCardless payment collected before (POST /refunds)
    id = "PM_order_7"
    amount = 5000
    currency = "GBP"

    [[mailbox.messages]]                # mail already sent (Mailbox.lookup finds it by ref)
    to = "ana@example.com"
    subject = "Your order"
    body = "..."
    ref = "order-7"

    [[github.issues]]                   # an issue to comment on (GET/POST .../issues/7/comments)
    repo = "acme/shop"
    number = 7
    title = "Refund failed"

    [[hooks.resources]]                 # what GET /hooks/.../{id} answers
    id = "ticket_7"
    status = "open"

    [kv]                                # the kv fake's values
    "config:limit" = 3

A PaymentIntent ``pi_X`` is served from its charge ``ch_X`` (the fake's one record of both), so
``pi_refundable_1`` and ``ch_refundable_1`` are one payment.  Ids are the user's own: the form
the fakes give new objects (``ch_0001``) is refused, it would collide with them.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from killdrill.errors import UsageError
from killdrill.ledger import Ledger

__all__ = ["Existing", "load_existing"]


def _toml() -> Callable[[str], Any] | None:
    """The standard library's TOML reader (Python 3.11+); on 3.10, JSON only."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads
    return None


_ID = re.compile(r"[A-Za-z0-9_]{1,200}")
_STRIPE = {"payment_intents": "pi_", "charges": "ch_", "customers": "cus_", "accounts": "acct_"}
_SECTIONS = ("stripe", "razorpay", "gocardless", "mailbox", "hooks", "github", "kv")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_INTENT_STATES = ("succeeded", "requires_capture", "requires_confirmation", "canceled")


@dataclass(frozen=True)
class Existing:
    """The objects of a existing-objects file, ready to plant: ``(provider, id, data, ref)`` and kv values."""

    source: str
    effects: tuple[tuple[str, str, dict[str, Any], str | None], ...] = ()
    kv: Mapping[str, Any] = field(default_factory=dict)

    def plant(self, ledger: Ledger) -> None:
        """Put the objects into ``ledger`` (its thread), in one transaction, recording no call."""
        with ledger.transaction() as tx:
            for provider, effect_id, data, ref in self.effects:
                tx.put_effect(provider, effect_id, data, ref=ref)
            for key, value in self.kv.items():
                tx.kv_set(key, value)


def load_existing(path: str) -> Existing:
    """Read and check a existing-objects file; a mistake is one UsageError line naming the file and entry."""
    where = f"existing-objects file {path}"
    toml = _toml() if path.endswith(".toml") else None
    if path.endswith(".toml") and toml is None:
        raise UsageError(f"{where}: reading TOML needs Python 3.11 or later: write the file as JSON")
    try:
        text = Path(path).read_text(encoding="utf-8")
        raw = toml(text) if toml is not None else json.loads(text)
    except OSError as exc:
        raise UsageError(f"{where}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:  # tomllib's and json's errors are ValueErrors
        raise UsageError(f"{where}: not {'TOML' if path.endswith('.toml') else 'JSON'}: {exc}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: expected a table of providers ({', '.join(_SECTIONS)})")
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise UsageError(f"{where}: unknown section {unknown[0]!r}: expected {', '.join(_SECTIONS)}")
    effects: list[tuple[str, str, dict[str, Any], str | None]] = []
    for name, entry in _entries(where, raw.get("stripe"), tuple(_STRIPE)):
        effects.append(_stripe(f"{where}: stripe.{name}", name, entry))
    for i, (_, entry) in enumerate(_entries(where, raw.get("razorpay"), ("payments",))):
        effects.append(_razorpay(f"{where}: razorpay.payments[{i}]", entry))
    for i, (_, entry) in enumerate(_entries(where, raw.get("gocardless"), ("payments",))):
        effects.append(_gocardless(f"{where}: gocardless.payments[{i}]", entry))
    for i, (_, entry) in enumerate(_entries(where, raw.get("mailbox"), ("messages",))):
        effects.append(_message(f"{where}: mailbox.messages[{i}]", i, entry))
    for i, (_, entry) in enumerate(_entries(where, raw.get("hooks"), ("resources",))):
        rid = _id(f"{where}: hooks.resources[{i}]", entry, "")
        effects.append(("hooks", rid, {"object": "hook", **entry}, None))
    for i, (_, entry) in enumerate(_entries(where, raw.get("github"), ("issues",))):
        effects.append(_issue(f"{where}: github.issues[{i}]", entry))
    ids = [(p, e) for p, e, _, _ in effects]
    if twice := next((i for i in ids if ids.count(i) > 1), None):
        raise UsageError(f"{where}: the id {twice[1]!r} is declared twice")
    kv = raw.get("kv") or {}
    if not isinstance(kv, dict):
        raise UsageError(f"{where}: kv must be a table of keys and values")
    return Existing(path, tuple(effects), dict(kv))


def _entries(where: str, section: Any, kinds: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    if section is None:
        return []
    if not isinstance(section, dict) or set(section) - set(kinds):
        raise UsageError(f"{where}: expected lists named {', '.join(kinds)} in that section")
    out = []
    for kind, items in section.items():
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise UsageError(f"{where}: {kind} must be a list of tables")
        out += [(kind, dict(i)) for i in items]
    return out


def _id(where: str, entry: dict[str, Any], prefix: str) -> str:
    value = entry.get("id")
    if not isinstance(value, str) or not _ID.fullmatch(value) or not value.startswith(prefix):
        raise UsageError(f"{where}: needs an id of letters, digits and _ starting {prefix!r} (got {value!r})")
    if value.removeprefix(prefix).isdigit():
        raise UsageError(f"{where}: {value!r} is the form the fakes give new objects; choose your own")
    return value


def _amount(where: str, entry: dict[str, Any], name: str, default: int | None = None) -> int:
    value = entry.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (name == "amount" and value < 1):
        raise UsageError(
            f"{where}: {name} must be a whole number of the currency's smallest unit, got {value!r}"
        )
    return value


def _stripe(where: str, kind: str, entry: dict[str, Any]) -> tuple[str, str, dict[str, Any], str | None]:
    oid = _id(where, entry, _STRIPE[kind])
    if kind in ("customers", "accounts"):
        return "payments", oid, {**entry, "object": kind.removesuffix("s")}, None
    amount = _amount(where, entry, "amount")
    refunded = _amount(where, entry, "amount_refunded", 0)
    if refunded > amount or not isinstance(entry.get("currency"), str):
        raise UsageError(f"{where}: needs a currency and amount_refunded <= amount")
    status = entry.pop("status", "succeeded")
    if kind == "charges":
        status = "succeeded"
    if status not in _INTENT_STATES:
        raise UsageError(f"{where}: status must be one of {', '.join(_INTENT_STATES)}, got {status!r}")
    tail = oid.split("_", 1)[1]
    data = {
        "metadata": {},
        **entry,
        "id": "ch_" + tail,
        "object": "charge",
        "status": "succeeded",
        "amount_refunded": refunded,
        "refunded": refunded >= amount,
        "intent_status": status,
        "captured": status in ("succeeded",),
    }
    if status == "requires_capture":
        data["capture_method"] = "manual"
    return "payments", "ch_" + tail, data, None


def _razorpay(where: str, entry: dict[str, Any]) -> tuple[str, str, dict[str, Any], str | None]:
    """A captured Razorpay payment (``pay_...``), refundable up to its amount."""
    pid = _id(where, entry, "pay_")
    amount = _amount(where, entry, "amount")
    refunded = _amount(where, entry, "amount_refunded", 0)
    if refunded > amount:
        raise UsageError(f"{where}: needs amount_refunded <= amount")
    state = "full" if refunded == amount else "partial" if refunded else None
    data = {"currency": "INR", "notes": {}, **entry, "id": pid, "entity": "payment", "status": "captured"}
    data.update(captured=True, amount_refunded=refunded, refund_status=state)
    return "razorpay", pid, data, None


def _gocardless(where: str, entry: dict[str, Any]) -> tuple[str, str, dict[str, Any], str | None]:
    """A GoCardless payment collected before the drill (``PM...``), refundable up to its amount."""
    pid = _id(where, entry, "PM")
    if pid.removeprefix("PM_").isdigit():
        raise UsageError(f"{where}: {pid!r} is the form the fakes give new objects; choose your own")
    amount = _amount(where, entry, "amount")
    refunded = _amount(where, entry, "amount_refunded", 0)
    if refunded > amount or not isinstance(entry.get("currency"), str):
        raise UsageError(f"{where}: needs a currency and amount_refunded <= amount")
    data = {"metadata": {}, "status": "paid_out", **entry, "id": pid, "amount_refunded": refunded}
    data["links"] = {"mandate": None, "creditor": "CR_0001", **(entry.get("links") or {})}
    return "gocardless", pid, data, None


def _message(where: str, i: int, entry: dict[str, Any]) -> tuple[str, str, dict[str, Any], str | None]:
    if not all(isinstance(entry.get(k), str) for k in ("to", "subject", "body")):
        raise UsageError(f"{where}: needs to, subject and body")
    mid = _id(where, entry, "msg_") if "id" in entry else f"msg_existing_{i + 1}"
    ref = entry.get("ref") if isinstance(entry.get("ref"), str) else None
    return "mailbox", mid, {"ref": ref, **entry, "id": mid, "delivered": True}, ref


def _issue(where: str, entry: dict[str, Any]) -> tuple[str, str, dict[str, Any], str | None]:
    repo, number = entry.get("repo"), entry.get("number")
    if not isinstance(repo, str) or not _REPO.fullmatch(repo):
        raise UsageError(f'{where}: needs repo = "owner/name" (got {repo!r})')
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise UsageError(f"{where}: needs a whole issue number of 1 or more (got {number!r})")
    if not isinstance(entry.get("title"), str):
        raise UsageError(f"{where}: needs a title")
    data = {"state": "open", **entry, "id_number": number}
    return "github", f"{repo}#{number}", data, repo
