"""How a provider answers a key it has seen (:class:`KeyRules`, Stripe's by default), and the
harness clock key lifetimes expire on."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from killdrill.fakes.errors import FakeProviderError, IdempotencyConflict, IdempotencyError
from killdrill.ledger import KeyState, Ledger, Tx

DEFAULT_KEY_TTL = 24 * 3600.0
CLOCK = "killdrill.clock"  # the settings row that holds the harness clock's offset


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
