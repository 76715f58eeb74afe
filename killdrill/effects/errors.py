"""The effects toolkit's errors, and the two exceptions a ``perform`` callable raises to say
"nothing was applied" (the only cases where a claim may be given back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from killdrill.effects.records import EffectRecord


class EffectError(RuntimeError):
    """Base of the toolkit's errors."""


class EffectAlreadyInFlight(EffectError):
    """The key's claim is in flight: another worker is on it, or a killed attempt left it.

    Re-sending could do the effect twice (the provider honours no key), so the caller
    must reconcile (look the effect up at the provider) instead of guessing.
    """

    def __init__(self, record: EffectRecord, *, owner_alive: bool | None) -> None:
        who = {True: "a live worker", False: "a dead attempt", None: "a worker on another host"}[owner_alive]
        super().__init__(
            f"effect {record.key!r} is in flight (claimed by {who}, attempt {record.attempt}); "
            "reconcile it with a lookup at the provider rather than re-sending"
        )
        self.record = record
        self.owner_alive = owner_alive


class KeyReuseError(EffectError):
    """The same key was claimed for a different payload: the key does not name one operation."""

    def __init__(self, key: str, stored: str | None, given: str | None) -> None:
        super().__init__(f"key {key!r} was claimed for payload {stored} and is now reused for {given}")
        self.key = key


class TransportNotSent(Exception):
    """Raised by a ``perform`` callable when the request provably never left (connection
    refused, DNS failure): the only case where giving the claim back is safe."""


class StepRejected(Exception):
    """Raised by a saga step's action when the provider definitively refused it (nothing was
    applied): the saga aborts and compensates the steps before it."""
