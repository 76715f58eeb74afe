"""One request to a fake: decide (key rules, fault budgets), perform, record, in the ledger."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from killdrill.fakes.errors import (
    ERRORS_BY_NAME,
    FakeProviderError,
    IndeterminateError,
    InjectedFault,
    StaleFence,
)
from killdrill.fakes.rules import STRIPE_RULES, KeyRules, harness_now
from killdrill.ledger import IN_FLIGHT, Ledger, Tx, canonical_json
from killdrill.records import CONFLICT, CREATED, FAILED, REJECTED, REPLAYED, Call

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


@dataclass(frozen=True)
class FakeRequest:
    """One request to a fake provider: what a provider method asks, however it is served (in
    process, over HTTP, by a wire profile), and the key rules of the API it imitates."""

    provider: str
    op: str
    key: str | None
    payload: dict[str, Any]
    perform: Perform
    rules: KeyRules = STRIPE_RULES
    fence: tuple[str, int] | None = None  # (resource, token): refused when a higher token was seen
    # The caller's runtime context (killdrill.agent.runtime_context: a durable runtime's own attempt),
    # recorded with the call.
    context: dict[str, Any] | None = None


def _stored(exc: FakeProviderError) -> dict[str, Any]:
    return {"status": exc.status, "body": exc.to_body(), "error": type(exc).__name__}


def _from_stored(resp: dict[str, Any]) -> FakeProviderError | None:
    if resp.get("error") is None:
        return None
    err = resp["body"]["error"]
    cls = ERRORS_BY_NAME.get(resp["error"], FakeProviderError)
    return cls(err["message"], status=resp["status"], code=err.get("code"), param=err.get("param"))


def _take(tx: Tx, provider: str, settings: dict[str, Any], budget: str) -> bool:
    """Consume one unit of a fault budget (persisted in the same transaction)."""
    left = int(settings.get(budget) or 0)
    if left <= 0:
        return False
    settings[budget] = left - 1
    tx.set_settings(provider, settings)
    return True


def check_fence(
    tx: Tx, provider: str, fence: tuple[str, int], *, write: bool = True
) -> FakeProviderError | None:
    """Refuse a token below the highest this resource has seen; remember a newer one (and, for a
    write, that this token wrote).  Kept per drill thread, in the provider's settings rows."""
    resource, token = fence
    if isinstance(token, bool) or not isinstance(token, int):
        return FakeProviderError(f"fence must be an integer token, not {token!r}", param="fence")
    row = f"{provider}.fences"
    fences = tx.settings(row)
    seen = fences.get(resource) or {"seen": 0, "wrote": 0}
    if token < seen["seen"]:
        return StaleFence(
            f"{provider}: fencing token {token} for {resource!r} is stale: token {seen['seen']} was"
            " already presented; this writer lost its lease",
            param="fence",
        )
    fences[resource] = {"seen": token, "wrote": token if write else seen["wrote"]}
    tx.set_settings(row, fences)
    return None


def process(ledger: Ledger, request: FakeRequest, *, attempt: int, pid: int, split: bool = False) -> Answer:
    """Decide, perform and record one request of caller ``attempt``/``pid``.

    In-process (``split=False``) it is one transaction.  The HTTP server passes ``split=True``:
    a keyed request first claims its key (committed: a concurrent request now gets a 409), waits
    the configured latency, then executes and stores its response in a second transaction.
    A fenced request is refused before anything else when the resource saw a higher token.
    """
    provider, op, key, payload = request.provider, request.op, request.key, request.payload
    rules, fence = request.rules, request.fence
    with ledger.transaction() as tx:
        tx.context = request.context
        settings = tx.settings(provider)
        if fence is not None:
            refused = check_fence(tx, provider, fence)
            if refused is not None:
                call = tx.record(provider, op, key, payload, REJECTED, None, attempt, pid)
                return Answer(call, refused.status, refused.to_body(), error=refused, store=False)
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
            return _execute(tx, request, settings, attempt, pid)
        latency = float(settings.get("latency") or 0.0)
    if latency > 0:
        threading.Event().wait(latency)
    with ledger.transaction() as tx:
        tx.context = request.context
        return _execute(tx, request, tx.settings(provider), attempt, pid)


def _execute(tx: Tx, request: FakeRequest, settings: dict[str, Any], attempt: int, pid: int) -> Answer:
    provider, op, key, payload = request.provider, request.op, request.key, request.payload
    rules = request.rules
    if _take(tx, provider, settings, "error_first"):
        err: FakeProviderError = InjectedFault(f"{provider}.{op}: injected server error, nothing happened")
        call = tx.record(provider, op, key, payload, FAILED, None, attempt, pid)
        if key is not None and rules.cache_errors:
            tx.complete_key(provider, key, _stored(err), None)
        elif key is not None:
            tx.release_key(provider, key)
        return Answer(call, err.status, err.to_body(), error=err, store=rules.cache_errors)
    try:
        effect_id, result = request.perform(tx)
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
