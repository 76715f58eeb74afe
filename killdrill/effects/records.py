"""What the store holds: claim states, event kinds, and the rows read back as dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

IN_FLIGHT = "in_flight"
SUCCEEDED = "succeeded"
RELEASED = "released"

# Event kinds appended to the log (the audit counts them).
EV_CLAIMED = "claimed"  # a fresh claim: this caller is about to perform the effect
EV_RECLAIMED = "reclaimed"  # a released claim claimed again, or an abandoned one taken over
EV_SUCCEEDED = "succeeded"  # the caller performed the effect and stored the result: a fresh success
EV_REPLAYED = "replayed"  # a succeeded key asked again: the stored result was returned
EV_RELEASED = "released"  # the request was provably not sent: the claim is given back
EV_RECONCILED = "reconciled"  # a claim left in flight was found delivered by a lookup


@dataclass(frozen=True)
class EffectRecord:
    """The current state of one key in the store."""

    key: str
    thread: str | None
    node: str | None
    occurrence: int | None
    attempt: int | None
    payload_hash: str | None
    status: str
    result: Any
    owner: str | None
    replayed: bool
    replay_count: int
    claims: int
    created_at: float
    updated_at: float
    completed_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EffectEvent:
    """One line of the append-only effect log."""

    id: int
    key: str
    event: str
    thread: str | None
    node: str | None
    occurrence: int | None
    attempt: int | None
    payload_hash: str | None
    owner: str | None
    at: float


@dataclass(frozen=True)
class Claim:
    """What ``claim`` found.

    ``state`` is ``claimed`` (the caller owns the claim and may perform the effect),
    ``succeeded`` (done before: ``record.result`` is the stored result, do nothing) or
    ``in_flight`` (someone claimed it and never finished; ``owner_alive`` says whether that
    worker is still running: True, False, or None when it cannot be told).
    """

    state: Literal["claimed", "succeeded", "in_flight"]
    record: EffectRecord
    owner_alive: bool | None = None
    taken_over: bool = False
