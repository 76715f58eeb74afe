"""Durable effects: stable idempotency keys, a claim-before-send result store, gates, sagas.

Delivery cannot be exactly-once; the *effect* can, when every attempt sends the same key
and the receiver (or this store, for receivers that honour no key) replays the stored
result.  The pieces:

- :func:`idempotency_key` derives a key from *what the action is* (thread, node, which
  occurrence, canonical payload), never from when or where it runs, so a resumed
  attempt sends the same key as the killed one.
- :class:`ResultStore` records intent *before* the effect (``claim``) under a unique
  constraint, so two racing resumers cannot both win, and keeps the result after it
  (``complete``).  Every transition is also appended to an event log that
  ``killdrill audit`` reads.
- :func:`durable_effect` for providers that honour keys (re-send on doubt: they replay),
  :func:`gate` for irreversible effects (at most once, reconciled by a lookup), and
  :func:`run_saga` for compensations that themselves run at most once, in reverse.
- :class:`FencedStore` and :func:`fenced_effect`: a lease with a fencing token, for workers
  whose liveness cannot be checked (another host); the provider must check the token.

:class:`RacyResultStore` is a *planted defect* (read, then insert, with a window): it
exists so the concurrency drill and the detection corpus have something real to catch.
Never use it.

Layer: beside ledger and integrations; may import ``agent`` and the shared value modules
(``canonical``, ``errors``).
"""

from killdrill.effects.durable import durable_effect, gate
from killdrill.effects.engine import EVENTS_TABLE, STATES_TABLE, make_engine, sqlalchemy_url
from killdrill.effects.errors import (
    EffectAlreadyInFlight,
    EffectError,
    KeyReuseError,
    StepRejected,
    TransportNotSent,
)
from killdrill.effects.fencing import LEASES_TABLE, FencedStore, Lease, LeaseHeld, LeaseLost, fenced_effect
from killdrill.effects.keys import canonical_json, idempotency_key, payload_hash
from killdrill.effects.records import (
    EV_CLAIMED,
    EV_RECLAIMED,
    EV_RECONCILED,
    EV_RELEASED,
    EV_REPLAYED,
    EV_SUCCEEDED,
    IN_FLIGHT,
    RELEASED,
    SUCCEEDED,
    Claim,
    EffectEvent,
    EffectRecord,
)
from killdrill.effects.sagas import SagaFailed, SagaResult, SagaStep, run_saga
from killdrill.effects.store import RacyResultStore, ResultStore

__all__ = [
    "EVENTS_TABLE",
    "EV_CLAIMED",
    "EV_RECLAIMED",
    "EV_RECONCILED",
    "EV_RELEASED",
    "EV_REPLAYED",
    "EV_SUCCEEDED",
    "IN_FLIGHT",
    "LEASES_TABLE",
    "RELEASED",
    "STATES_TABLE",
    "SUCCEEDED",
    "Claim",
    "EffectAlreadyInFlight",
    "EffectError",
    "EffectEvent",
    "EffectRecord",
    "FencedStore",
    "KeyReuseError",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "RacyResultStore",
    "ResultStore",
    "SagaFailed",
    "SagaResult",
    "SagaStep",
    "StepRejected",
    "TransportNotSent",
    "canonical_json",
    "durable_effect",
    "fenced_effect",
    "gate",
    "idempotency_key",
    "make_engine",
    "payload_hash",
    "run_saga",
    "sqlalchemy_url",
]
