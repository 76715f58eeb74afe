"""Counting fake providers: one per effect class, every call recorded in the durable ledger.

``connect()`` reads ``KILLDRILL_LEDGER``, ``KILLDRILL_THREAD`` and ``KILLDRILL_ATTEMPT`` (set by
the supervisor; from the agent's environment when what started it stripped them, ``locate``); outside a
drill it records to a temporary ledger, so an agent runs by hand; under a drill it cannot find,
it refuses (``locate.DrillNotFound``), never recording into a ledger of its own.

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

Fencing tokens (``fence=``, on ``payments.charge``, ``counter.increment`` and ``kv.set``): the
fake keeps the highest token presented per resource (the idempotency key of a charge, the
counter's name, the kv key) and refuses a request carrying a lower one (``StaleFence``, a 409,
recorded ``rejected``: nothing happened), the storage-side check of a lease's fencing token
(killdrill.effects.fencing).  ``provider.fence(resource, token)`` presents a new holder's token
before it writes and answers the highest token that already wrote.  Fences are kept per drill
thread.  Real providers that offer it: conditional writes (DynamoDB condition expressions, etcd
or ZooKeeper compare-and-set, GCS generation preconditions) and Kafka's producer epochs.  Stripe
offers none, so the Stripe wire route has no ``fence``: there the idempotency key is the defence.
Without ``fence`` every fake behaves as before.

Key expiry runs on a harness clock: real time plus an offset persisted in the ledger, which
:func:`advance_clock` moves forward (a test proves the 24 h rule without waiting a day).
How a repeated key is answered is a :class:`KeyRules` per provider; the default is Stripe's.

Modules: ``errors`` (Stripe-shaped errors), ``rules`` (key rules, harness clock), ``processing``
(one request: decide, perform, record), ``provider`` (the base class, which registers each fake),
``builtin`` (the seven fakes), ``handle`` (``Fakes``, ``connect``), ``locate`` (the drill of a
process whose environment was stripped).  A new fake is one module
defining a :class:`Provider` subclass: see :mod:`killdrill.fakes.provider`.

Layer (as ``killdrill.fakes``): beside verdict and process; may import ``ledger``, ``agent``,
``providers``, ``records``, ``canonical`` and ``errors``.
"""

from __future__ import annotations

from killdrill.fakes.builtin import KV, Counter, Inventory, Mailbox, Payments, Tickets, Webhooks
from killdrill.fakes.errors import (
    FakeProviderError,
    IdempotencyConflict,
    IdempotencyError,
    IndeterminateError,
    InjectedFault,
    StaleFence,
)
from killdrill.fakes.handle import Fakes, connect
from killdrill.fakes.processing import FAULT_SETTINGS, Answer, FakeRequest, Perform, process
from killdrill.fakes.provider import Provider, fake_classes
from killdrill.fakes.rules import DEFAULT_KEY_TTL, STRIPE_RULES, KeyRules, advance_clock, harness_now
from killdrill.providers import Operation, Param

__all__ = [
    "DEFAULT_KEY_TTL",
    "FAULT_SETTINGS",
    "KV",
    "PROVIDERS",
    "STRIPE_RULES",
    "Answer",
    "Counter",
    "FakeProviderError",
    "FakeRequest",
    "Fakes",
    "IdempotencyConflict",
    "IdempotencyError",
    "IndeterminateError",
    "InjectedFault",
    "Inventory",
    "KeyRules",
    "Mailbox",
    "Operation",
    "Param",
    "Payments",
    "Perform",
    "Provider",
    "StaleFence",
    "Tickets",
    "Webhooks",
    "advance_clock",
    "connect",
    "fake_classes",
    "harness_now",
    "process",
]

PROVIDERS = tuple(fake_classes())
"""The built-in fakes' names (a provider defined elsewhere is in :func:`fake_classes`)."""
