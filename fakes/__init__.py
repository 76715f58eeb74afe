"""Counting fake providers: one per effect class, every call recorded in the durable ledger.

``connect()`` reads ``KILLDRILL_LEDGER``, ``KILLDRILL_THREAD`` and ``KILLDRILL_ATTEMPT`` (set by
the supervisor); outside a drill it records to a temporary ledger, so an agent runs by hand.

Order of every call: the provider's decision, its effect and the call's record are committed in
ONE transaction, THEN the fake announces ``during:PROVIDER.OP`` (where the supervisor may kill
the caller: the provider did it, the caller never heard), THEN it answers.  Because the
in-process fake is atomic, a SIGKILL of the caller can never leave a key half-done; the
"in flight" state only exists on the HTTP server, which holds a request between claiming the
key and completing it, and under the ``stall_first`` fault (a provider that died mid-request).
Every recorded call emits ``during:``, whatever its outcome (created,
replayed, rejected, conflict, failed): the provider answered, the caller may not hear it.
Reads (``lookup``, ``get``) are not calls of the effect: they are neither recorded nor announced.

Fault settings (``provider.configure(...)``) are persisted in the ledger under the thread, so
they survive the caller's restarts; each budget counts down as requests consume it:
``fail_first=N``  the next N requests fail before anything happens (``InjectedFault``,
                  recorded ``failed``, key not stored: retryable, like a load shedder's 503);
``error_first=N`` the next N requests fail inside the provider, nothing happens, and the 500 is
                  stored under the key and replayed for it (Stripe's documented semantics);
``indeterminate_first=N`` the effect happens and is stored, then the caller gets
                  ``IndeterminateError`` (over HTTP: a 500); a retry with the key replays it;
``drop_first=N``  like indeterminate, but over HTTP the connection closes with no response;
``stall_first=N`` keyed requests only: the provider claims the key and dies mid-request: nothing
                  happens, the key stays in flight (every retry gets 409) and the caller gets
                  ``IndeterminateError``;
``rate_limit_first=N`` the next N requests get a 429 before anything happens (not stored);
``latency=S``     HTTP only: hold a request S seconds between claiming its key and executing;
``key_ttl=S``     how long a completed key is remembered (default: the provider's, 24 h for Stripe).

Key expiry runs on a harness clock: real time plus an offset persisted in the ledger, which
:func:`advance_clock` moves forward (a test proves the 24 h rule without waiting a day).
How a repeated key is answered is a :class:`KeyRules` per provider; the default is Stripe's.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from killdrill.agent import boundary
from killdrill.ledger import IN_FLIGHT, KeyState, Ledger, Tx, canonical_json
from killdrill.records import CONFLICT, CREATED, FAILED, REJECTED, REPLAYED, Call

__all__ = [
    "DEFAULT_KEY_TTL",
    "FAULT_SETTINGS",
    "KV",
    "PROVIDERS",
    "Answer",
    "Counter",
    "FakeProviderError",
    "Fakes",
    "IdempotencyConflict",
    "IdempotencyError",
    "IndeterminateError",
    "InjectedFault",
    "Inventory",
    "KeyRules",
    "Mailbox",
    "Payments",
    "Provider",
    "Tickets",
    "Webhooks",
    "advance_clock",
    "connect",
    "harness_now",
    "process",
]

DEFAULT_KEY_TTL = 24 * 3600.0
PROVIDERS = ("payments", "mailbox", "tickets", "webhooks", "counter", "kv", "inventory")
FAULT_SETTINGS = (
    "fail_first",
    "error_first",
    "indeterminate_first",
    "drop_first",
    "stall_first",
    "rate_limit_first",
    "latency",
    "key_ttl",
)
CLOCK = "killdrill.clock"  # the settings row that holds the harness clock's offset


class FakeProviderError(Exception):
    """A fake provider refused or failed a request; ``status``/``type``/``code`` as Stripe's errors."""

    status = 400
    type = "invalid_request_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        param: str | None = None,
        call: Call | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.param = param
        self.call = call

    def to_body(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, "code": self.code, "param": self.param}}


class IdempotencyError(FakeProviderError):
    """The key was first used with another payload (or operation): nothing happened."""

    type = "idempotency_error"
    code = "idempotency_error"


class IdempotencyConflict(FakeProviderError):
    """The key's first request is still being executed (409): nothing happened, retry later."""

    status = 409
    code = "idempotency_key_in_use"


class InjectedFault(FakeProviderError):
    """A configured fault before the effect: nothing happened."""

    status = 500
    type = "api_error"
    code = "injected_fault"


class IndeterminateError(FakeProviderError):
    """A configured fault after the effect committed: it happened, the caller was not told."""

    status = 500
    type = "api_error"
    code = "indeterminate"


_ERRORS: dict[str, type[FakeProviderError]] = {
    c.__name__: c for c in (FakeProviderError, IdempotencyError, IdempotencyConflict, InjectedFault)
}


@dataclass
class Answer:
    """What the provider answered one request, after its record was committed."""

    call: Call
    status: int
    body: dict[str, Any]
    replayed: bool = False
    error: FakeProviderError | None = None
    fault: str | None = None  # "indeterminate" or "drop": the effect happened, the answer is lost
    store: bool = field(default=True, repr=False)

    @property
    def should_retry(self) -> bool:
        """Stripe-Should-Retry: would the same request (same key) possibly succeed?"""
        return self.fault is not None or self.status in (409, 429, 503)


Perform = Callable[[Tx], tuple[str | None, dict[str, Any]]]


def _stripe_in_flight(key: str) -> FakeProviderError:
    return IdempotencyConflict(
        f"There is currently another in-progress request using this idempotency key {key!r}; "
        "retry after it has completed."
    )


def _stripe_mismatch(key: str, state: KeyState) -> FakeProviderError:
    return IdempotencyError(
        f"Keys for idempotent requests can only be used with the same parameters they were "
        f"first used with: {key!r} was first used for {state.provider}.{state.op} with {state.payload}.",
        param="idempotency_key",
    )


@dataclass(frozen=True)
class KeyRules:
    """How a provider answers a key it has seen; the defaults are Stripe's documented rules.

    ``repeat`` None replays the stored response; a function refuses the repeat instead (GoCardless
    answers 409 with the first resource's id).  ``mismatch`` None: the key alone decides, another
    payload is answered as a repeat.  ``cache_errors``: a 500 after execution began is
    stored and replayed (Stripe); False stores successes only (Checkout.com).
    """

    in_flight: Callable[[str], FakeProviderError] = _stripe_in_flight
    mismatch: Callable[[str, KeyState], FakeProviderError] | None = _stripe_mismatch  # None: as a repeat
    repeat: Callable[[str, KeyState], FakeProviderError] | None = None
    cache_errors: bool = True
    ttl: float = DEFAULT_KEY_TTL


STRIPE_RULES = KeyRules()


def harness_now(tx: Tx) -> float:
    """The harness clock: real time plus the offset :func:`advance_clock` persisted."""
    return time.time() + float(tx.settings(CLOCK).get("offset") or 0.0)


def advance_clock(ledger: Ledger, seconds: float) -> float:
    """Move the harness clock forward (key lifetimes expire on it); returns the total offset."""
    with ledger.transaction() as tx:
        settings = tx.settings(CLOCK)
        settings["offset"] = float(settings.get("offset") or 0.0) + seconds
        tx.set_settings(CLOCK, settings)
    return float(settings["offset"])


def _stored(exc: FakeProviderError) -> dict[str, Any]:
    return {"status": exc.status, "body": exc.to_body(), "error": type(exc).__name__}


def _from_stored(resp: dict[str, Any]) -> FakeProviderError | None:
    if resp.get("error") is None:
        return None
    err = resp["body"]["error"]
    cls = _ERRORS.get(resp["error"], FakeProviderError)
    return cls(err["message"], status=resp["status"], code=err.get("code"), param=err.get("param"))


def _take(tx: Tx, provider: str, settings: dict[str, Any], budget: str) -> bool:
    """Consume one unit of a fault budget (persisted in the same transaction)."""
    left = int(settings.get(budget) or 0)
    if left <= 0:
        return False
    settings[budget] = left - 1
    tx.set_settings(provider, settings)
    return True


def process(
    ledger: Ledger,
    provider: str,
    op: str,
    key: str | None,
    payload: dict[str, Any],
    perform: Perform,
    *,
    attempt: int,
    pid: int,
    split: bool = False,
    rules: KeyRules = STRIPE_RULES,
) -> Answer:
    """Decide, perform and record one request.

    In-process (``split=False``) it is one transaction.  The HTTP server passes ``split=True``:
    a keyed request first claims its key (committed: a concurrent request now gets a 409), waits
    the configured latency, then executes and stores its response in a second transaction.
    """
    with ledger.transaction() as tx:
        settings = tx.settings(provider)
        if key is not None:
            ttl = float(settings.get("key_ttl") or rules.ttl)
            state = tx.key_state(provider, key, ttl, now=harness_now(tx))
            if state is not None:
                if state.status == IN_FLIGHT:
                    err = rules.in_flight(key)
                    call = tx.record(provider, op, key, payload, CONFLICT, None, attempt, pid)
                    return Answer(call, err.status, err.to_body(), error=err, store=False)
                if rules.mismatch is not None and (
                    state.op != op or state.payload != canonical_json(payload)
                ):
                    err = rules.mismatch(key, state)
                    call = tx.record(provider, op, key, payload, REJECTED, None, attempt, pid)
                    return Answer(call, err.status, err.to_body(), error=err, store=False)
                if rules.repeat is not None:
                    err = rules.repeat(key, state)
                    call = tx.record(provider, op, key, payload, REJECTED, state.effect_id, attempt, pid)
                    return Answer(call, err.status, err.to_body(), error=err, store=False)
                resp = state.response or {}
                call = tx.record(provider, op, key, payload, REPLAYED, state.effect_id, attempt, pid)
                stored_err = _from_stored(resp)
                return Answer(call, int(resp["status"]), resp["body"], replayed=True, error=stored_err)
        if _take(tx, provider, settings, "rate_limit_first"):
            err = InjectedFault(f"{provider}.{op}: injected rate limit (rate_limit_first)", status=429)
            call = tx.record(provider, op, key, payload, FAILED, None, attempt, pid)
            return Answer(call, err.status, err.to_body(), error=err, store=False)
        if _take(tx, provider, settings, "fail_first"):
            err = InjectedFault(
                f"{provider}.{op}: injected failure before the effect (fail_first)", status=503
            )
            call = tx.record(provider, op, key, payload, FAILED, None, attempt, pid)
            return Answer(call, err.status, err.to_body(), error=err, store=False)
        if key is not None:
            tx.claim_key(provider, key, op, payload, attempt)
            if _take(tx, provider, settings, "stall_first"):
                # The provider died mid-request: the key stays locked in flight, nothing happened,
                # and the caller only ever sees a timeout.
                err = IndeterminateError(f"{provider}.{op}: the provider stalled mid-request")
                call = tx.record(provider, op, key, payload, FAILED, None, attempt, pid)
                return Answer(call, err.status, err.to_body(), error=err, store=False)
        if not split:
            return _execute(tx, provider, op, key, payload, perform, settings, attempt, pid, rules)
        latency = float(settings.get("latency") or 0.0)
    if latency > 0:
        threading.Event().wait(latency)
    with ledger.transaction() as tx:
        return _execute(tx, provider, op, key, payload, perform, tx.settings(provider), attempt, pid, rules)


def _execute(
    tx: Tx,
    provider: str,
    op: str,
    key: str | None,
    payload: dict[str, Any],
    perform: Perform,
    settings: dict[str, Any],
    attempt: int,
    pid: int,
    rules: KeyRules,
) -> Answer:
    if _take(tx, provider, settings, "error_first"):
        err: FakeProviderError = InjectedFault(f"{provider}.{op}: injected server error, nothing happened")
        call = tx.record(provider, op, key, payload, FAILED, None, attempt, pid)
        if key is not None and rules.cache_errors:
            tx.complete_key(provider, key, _stored(err), None)
        elif key is not None:
            tx.release_key(provider, key)
        return Answer(call, err.status, err.to_body(), error=err, store=rules.cache_errors)
    try:
        effect_id, result = perform(tx)
    except FakeProviderError as err:  # a validation refusal: nothing happened, not stored (Stripe)
        if key is not None:
            tx.release_key(provider, key)
        call = tx.record(provider, op, key, payload, REJECTED, None, attempt, pid)
        return Answer(call, err.status, err.to_body(), error=err, store=False)
    call = tx.record(provider, op, key, payload, CREATED, effect_id, attempt, pid)
    if key is not None:
        tx.complete_key(provider, key, {"status": 200, "body": result, "error": None}, effect_id)
    fault = None
    if _take(tx, provider, settings, "indeterminate_first"):
        fault = "indeterminate"
    elif _take(tx, provider, settings, "drop_first"):
        fault = "drop"
    return Answer(call, 200, result, fault=fault)


class Provider:
    """Base of the fakes: records under the handle's thread and attempt, announces ``during:``."""

    name = ""

    def __init__(self, fakes: Fakes) -> None:
        self.fakes = fakes

    @property
    def ledger(self) -> Ledger:
        return self.fakes.ledger

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Persist fault settings for this provider (see the module docstring); returns them all."""
        unknown = set(settings) - set(FAULT_SETTINGS)
        if unknown:
            raise TypeError(f"unknown fault setting(s) {sorted(unknown)}; expected {FAULT_SETTINGS}")
        return self.ledger.configure(self.name, **settings)

    def calls(self, op: str | None = None) -> list[Call]:
        """This provider's recorded calls, in order."""
        return self.ledger.calls(self.name, op)

    def _invoke(self, op: str, key: str | None, payload: dict[str, Any], perform: Perform) -> dict[str, Any]:
        return self.fakes._run(self.name, op, key, payload, perform)

    def _create(self, prefix: str, data: dict[str, Any], ref: str | None = None) -> Perform:
        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            effect_id = tx.next_id(prefix)
            result = {**data, "id": effect_id}
            tx.put_effect(self.name, effect_id, result, ref=ref)
            return effect_id, result

        return perform


class Payments(Provider):
    """Stripe-like charges: keyed requests replay, mismatched reuse is refused, no key charges again."""

    name = "payments"

    def charge(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        data = {**payload, "object": "charge", "status": "succeeded", "refunded": False}
        return self._invoke("charge", idempotency_key, payload, self._create("ch", data, ref=idempotency_key))

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

    def create(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        return self._invoke(
            "create", idempotency_key, payload, self._create("tkt", {**payload, "status": "open"})
        )


class Webhooks(Provider):
    """An outgoing webhook: every post is a delivery unless an idempotency key repeats."""

    name = "webhooks"

    def post(self, idempotency_key: str | None = None, **payload: Any) -> dict[str, Any]:
        return self._invoke(
            "post", idempotency_key, payload, self._create("wh", {**payload, "delivered": True})
        )


class Counter(Provider):
    """A counter: increment is not idempotent (an optional key is honoured)."""

    name = "counter"

    def increment(self, name: str, by: int = 1, idempotency_key: str | None = None) -> dict[str, Any]:
        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            value = tx.counter(name, by)
            effect_id = tx.next_id("inc")
            return effect_id, {"id": effect_id, "name": name, "by": by, "value": value}

        return self._invoke("increment", idempotency_key, {"name": name, "by": by}, perform)

    def get(self, name: str) -> int:
        return self.ledger.counter_value(name)


class KV(Provider):
    """An idempotent store: ``set`` converges; its final state goes into the snapshot."""

    name = "kv"

    def set(self, key: str, value: Any) -> dict[str, Any]:
        def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
            tx.kv_set(key, value)
            return key, {"key": key, "value": value}

        return self._invoke("set", None, {"key": key, "value": value}, perform)

    def get(self, key: str, default: Any = None) -> Any:
        return self.ledger.kv_get(key, default)


class Mailbox(Provider):
    """Irreversible delivery: every send is a message, nothing dedupes; ``lookup(ref)`` reconciles."""

    name = "mailbox"

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


class Fakes:
    """One handle per agent process: the fakes of every effect class, on one ledger and thread."""

    def __init__(self, ledger: Ledger, attempt: int = 1) -> None:
        self.ledger = ledger
        self.thread = ledger.thread
        self.attempt = attempt
        self.payments = Payments(self)
        self.mailbox = Mailbox(self)
        self.tickets = Tickets(self)
        self.webhooks = Webhooks(self)
        self.counter = Counter(self)
        self.kv = KV(self)
        self.inventory = Inventory(self)

    def __repr__(self) -> str:
        return f"Fakes({self.ledger!r}, attempt={self.attempt})"

    def provider(self, name: str) -> Provider:
        """A fake by name (``payments``, ``mailbox``, ...); KeyError if there is none."""
        fake = getattr(self, name, None) if name in PROVIDERS else None
        if not isinstance(fake, Provider):
            raise KeyError(name)
        return fake

    def _run(
        self, provider: str, op: str, key: str | None, payload: dict[str, Any], perform: Perform
    ) -> dict[str, Any]:
        """In-process: one atomic transaction, then ``during:``, then the answer or its exception."""
        answer = process(
            self.ledger, provider, op, key, payload, perform, attempt=self.attempt, pid=os.getpid()
        )
        boundary(f"during:{provider}.{op}")
        if answer.fault is not None:
            raise IndeterminateError(
                f"{provider}.{op}: the request was executed ({answer.call.effect_id}) but the response "
                f"was lost ({answer.fault})",
                call=answer.call,
            )
        if answer.error is not None:
            answer.error.call = answer.call
            raise answer.error
        return {**answer.body, "replayed": answer.replayed}


_temp_dir: str | None = None
_temp_lock = threading.Lock()


def _temporary_ledger() -> str:
    """A ledger for a run by hand (no drill): one per process, removed when the process exits."""
    global _temp_dir
    with _temp_lock:
        if _temp_dir is None:
            _temp_dir = tempfile.mkdtemp(prefix="killdrill-fakes-")
            atexit.register(shutil.rmtree, _temp_dir, True)
        return os.path.join(_temp_dir, "ledger.sqlite")


def connect(
    ledger: str | os.PathLike[str] | Ledger | None = None,
    *,
    thread: str | None = None,
    attempt: int | None = None,
) -> Fakes:
    """The fakes of this run: ledger, thread and attempt default to the supervisor's environment."""
    if isinstance(ledger, Ledger):
        if thread is not None and thread != ledger.thread:
            ledger = Ledger(ledger.url, thread)
    else:
        where = ledger if ledger is not None else os.environ.get("KILLDRILL_LEDGER") or _temporary_ledger()
        ledger = Ledger(where, thread or os.environ.get("KILLDRILL_THREAD") or "default")
    if attempt is None:
        attempt = int(os.environ.get("KILLDRILL_ATTEMPT") or 1)
    return Fakes(ledger, attempt)
