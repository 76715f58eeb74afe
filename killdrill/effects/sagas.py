"""Sagas whose actions and compensations each run at most once, compensations in reverse."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from killdrill.effects.durable import durable_effect, gate
from killdrill.effects.errors import EffectError, StepRejected
from killdrill.effects.keys import idempotency_key
from killdrill.effects.records import SUCCEEDED
from killdrill.effects.store import ResultStore


@dataclass(frozen=True)
class SagaStep:
    """One step of a saga: ``action(key)`` does it, ``compensate(key, result)`` undoes it.

    Both receive the idempotency key to send to the provider.  ``honours_keys`` says whether
    the action's provider replays a repeated key; if not, an action left in flight is
    resolved by ``reconcile`` (as in :func:`gate`).  Same for the compensation.
    """

    name: str
    action: Callable[[str], Any]
    compensate: Callable[[str, Any], Any] | None = None
    honours_keys: bool = False
    reconcile: Callable[[str], object] | None = None
    compensate_honours_keys: bool = False
    compensate_reconcile: Callable[[str], object] | None = None
    payload: Any = None


@dataclass(frozen=True)
class SagaResult:
    saga_id: str
    results: dict[str, Any] = field(default_factory=dict)


class SagaFailed(EffectError):
    """A step was rejected; the steps before it were compensated (in reverse order)."""

    def __init__(self, saga_id: str, failed_step: str, reason: str, compensated: list[str]) -> None:
        super().__init__(
            f"saga {saga_id!r} failed at step {failed_step!r} ({reason}); "
            f"compensated: {', '.join(compensated) or 'nothing'}"
        )
        self.saga_id = saga_id
        self.failed_step = failed_step
        self.reason = reason
        self.compensated = compensated


def _saga_key(saga_id: str, kind: str, name: str) -> str:
    return idempotency_key(saga_id, f"saga.{kind}.{name}", 0, {"saga": saga_id, "step": name})


def _run_step(
    store: ResultStore,
    key: str,
    fn: Callable[[], Any],
    *,
    honours_keys: bool,
    reconcile: Callable[[str], object] | None,
    saga_id: str,
    node: str,
    payload: Any,
) -> Any:
    if honours_keys:
        return durable_effect(
            store, key, fn, provider_honours_keys=True, thread=saga_id, node=node, payload=payload
        )
    return gate(store, key, fn, reconcile=reconcile, thread=saga_id, node=node, payload=payload)


def run_saga(store: ResultStore, saga_id: str, steps: Sequence[SagaStep]) -> SagaResult:
    """Run ``steps`` in order; if one raises :class:`StepRejected`, compensate the ones before it.

    The decision to abort is itself stored before any compensation runs, so a resumed
    attempt goes straight back to compensating (it does not retry the rejected step, which
    might succeed this time and leave half a saga).  Each action and each compensation goes
    through the store under its own key: at most once each, compensations in reverse order.
    Any other exception propagates untouched: it is ambiguous, and a resume will settle it.
    """
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"saga step names must be unique: {names}")
    abort_key = _saga_key(saga_id, "abort", "")
    aborted = store.get(abort_key)
    results: dict[str, Any] = {}
    if aborted is None or aborted.status != SUCCEEDED:
        for step in steps:
            key = _saga_key(saga_id, "step", step.name)
            try:
                results[step.name] = _run_step(
                    store,
                    key,
                    functools.partial(step.action, key),
                    honours_keys=step.honours_keys,
                    reconcile=step.reconcile,
                    saga_id=saga_id,
                    node=f"saga.{step.name}",
                    payload=step.payload,
                )
            except StepRejected as exc:
                record = {"failed_step": step.name, "reason": str(exc) or type(exc).__name__}
                # The abort decision is plain data: storing it twice writes the same row.
                if store.claim(abort_key, thread=saga_id, node="saga.abort").state != "succeeded":
                    store.complete(abort_key, record)
                aborted = store.get(abort_key)
                break
        else:
            return SagaResult(saga_id, results)
    assert aborted is not None and aborted.result is not None
    failed = aborted.result["failed_step"]
    compensated: list[str] = []
    for step in reversed(steps[: names.index(failed)]):
        done = store.get(_saga_key(saga_id, "step", step.name))
        if step.compensate is None or done is None or done.status != SUCCEEDED:
            continue
        key = _saga_key(saga_id, "compensate", step.name)
        _run_step(
            store,
            key,
            functools.partial(step.compensate, key, done.result),
            honours_keys=step.compensate_honours_keys,
            reconcile=step.compensate_reconcile,
            saga_id=saga_id,
            node=f"saga.compensate.{step.name}",
            payload=step.payload,
        )
        compensated.append(step.name)
    raise SagaFailed(saga_id, failed, aborted.result["reason"], compensated)
