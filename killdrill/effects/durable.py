"""The two ways through the store: :func:`durable_effect` (providers that honour keys) and
:func:`gate` (irreversible effects, reconciled by a lookup)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from killdrill.effects.errors import EffectAlreadyInFlight, StepRejected, TransportNotSent
from killdrill.effects.records import Claim
from killdrill.effects.store import ResultStore

T = TypeVar("T")


def _claim_waiting(store: ResultStore, key: str, wait_s: float, poll_s: float, **claim_kw: Any) -> Claim:
    """Claim; while a *live* worker holds the key, wait for it (up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        c = store.claim(key, **claim_kw)
        if c.state != "in_flight":
            return c
        if c.owner_alive is False:
            return c
        if time.monotonic() >= deadline:
            raise EffectAlreadyInFlight(c.record, owner_alive=c.owner_alive)
        time.sleep(poll_s)


def _perform(store: ResultStore, key: str, perform: Callable[[], T]) -> T:
    from killdrill.agent import boundary

    # The claim is committed, the request not sent: a kill here leaves the claim in flight with
    # nothing done, the case a resume must tell apart from "sent, answer lost".  Named, so a
    # drill reaches it on purpose rather than by a lucky random millisecond.
    boundary("after:effects.claim")
    try:
        result = perform()
    except (TransportNotSent, StepRejected):
        store.release(key)  # provably nothing was applied
        raise
    store.complete(key, result)
    return result


def durable_effect(
    store: ResultStore,
    key: str,
    perform: Callable[[], T],
    *,
    provider_honours_keys: bool,
    thread: str | None = None,
    node: str | None = None,
    occurrence: int | None = None,
    payload: Any = None,
    wait_s: float = 0.0,
    poll_s: float = 0.05,
) -> T:
    """Perform an effect at most once per ``key`` in this store, and remember its result.

    - succeeded before: return the stored result, the provider is not called;
    - fresh: claim, ``perform()`` (which must send ``key`` to the provider), store the result;
    - left in flight by a dead attempt: when the provider honours keys, take the claim over
      and re-send with the *same* key (the provider replays if the first request landed);
      otherwise raise :class:`EffectAlreadyInFlight` — only a lookup can tell, see :func:`gate`;
    - held by a live worker: wait up to ``wait_s`` for it, then :class:`EffectAlreadyInFlight`;
    - ``perform`` raises :class:`TransportNotSent` (or :class:`StepRejected`): the claim is
      released and the error re-raised.
      Any other error leaves the claim in flight: the request may have landed.
    """
    kw = dict(thread=thread, node=node, occurrence=occurrence, payload=payload)
    while True:
        c = _claim_waiting(store, key, wait_s, poll_s, **kw)
        if c.state == "succeeded":
            return c.record.result  # type: ignore[no-any-return]  # the T perform() returned, from JSON
        if c.state == "claimed":
            return _perform(store, key, perform)
        if not provider_honours_keys:
            raise EffectAlreadyInFlight(c.record, owner_alive=c.owner_alive)
        if store.take_over(c) is not None:
            return _perform(store, key, perform)
        # Another resumer took it over first: look again (it is live now, or done).


def gate(
    store: ResultStore,
    key: str,
    send: Callable[[], T],
    *,
    reconcile: Callable[[str], object] | None = None,
    thread: str | None = None,
    node: str | None = None,
    occurrence: int | None = None,
    payload: Any = None,
    wait_s: float = 0.0,
    poll_s: float = 0.05,
) -> T | Any:
    """At most once for an irreversible effect (an email, a delete): meant as the last step.

    A claim left in flight by a dead attempt is resolved by ``reconcile(key)`` — e.g.
    ``lambda k: mailbox.lookup(k)``: truthy means it was delivered (the claim is marked done;
    a non-bool truthy value is stored as the result), falsy means it was not (it is sent now).
    Without ``reconcile`` such a claim raises :class:`EffectAlreadyInFlight`: never guess.
    ``send`` must carry ``key`` as the provider-side reference that ``reconcile`` looks up.
    """
    kw = dict(thread=thread, node=node, occurrence=occurrence, payload=payload)
    while True:
        c = _claim_waiting(store, key, wait_s, poll_s, **kw)
        if c.state == "succeeded":
            return c.record.result
        if c.state == "claimed":
            return _perform(store, key, send)
        if reconcile is None:
            raise EffectAlreadyInFlight(c.record, owner_alive=c.owner_alive)
        if store.take_over(c) is None:
            continue
        found = reconcile(key)
        if found:
            result: Any = {"reconciled": True} if found is True else found
            store.complete(key, result, reconciled=True)
            return result
        return _perform(store, key, send)
