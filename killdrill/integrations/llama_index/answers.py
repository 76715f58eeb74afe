"""LlamaIndex Workflows' scripted human (``--answer``): a step waiting in ``ctx.wait_for_event``
gets the next answer as the event it waits for, sent through the handler
(``handler.ctx.send_event(HumanResponseEvent(response=ANSWER))``), as the documented driver's
person answers an ``InputRequiredEvent`` read from ``handler.stream_events()``.

Part of :mod:`killdrill.integrations.llama_index`, whose ``stream_events`` wrapper hands its events
to :func:`answering` when the drill gave answers.  The waits are read from the context's own
snapshot (its pending waiters), when the stream starts and at each event, so a run resumed from a
saved context (``Context.from_dict``), whose waiter event is never published again, is answered
as well as a fresh one.  The wait's identity across kills is the waiter id the runtime saves with
the context (the waiter's event type, requirements and work item); it keeps its answer
(:mod:`killdrill.integrations._answers`).  The ``InputRequiredEvent`` of a wait answered so is not
yielded: the driver's own prompt (``input()``) is never reached.  An answer for a
``HumanResponseEvent`` (or an event with a ``response`` field) is its response; for another event,
a JSON object is its fields.  A wait with no answer left is left to the driver, and the agent's
stderr says which one.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

from killdrill.integrations import _answers

__all__ = ["answering", "event_for", "pending_waits"]


def pending_waits(snapshot: Any) -> list[tuple[str, str]]:
    """``(waiter id, event type's qualified name)`` of every wait a context snapshot
    (``Context.to_dict()``) holds unresolved."""
    out = []
    workers = snapshot.get("workers") if isinstance(snapshot, dict) else None
    for worker in (workers or {}).values():
        for waiter in (worker or {}).get("collected_waiters") or ():
            if waiter.get("resolved_event") is None and waiter.get("waiter_id"):
                out.append((str(waiter["waiter_id"]), str(waiter.get("waiting_for_event") or "")))
    return out


def event_for(qualified: str, value: Any) -> Any:
    """The event of type ``qualified`` (``module.Class``) that carries one answer."""
    module, _, name = qualified.rpartition(".")
    cls = getattr(sys.modules.get(module), name, None)
    if cls is None:
        raise ValueError(f"--answer: the awaited event type {qualified} is not loaded")
    fields = getattr(cls, "model_fields", {})
    if "response" in fields or any(c.__name__ == "HumanResponseEvent" for c in cls.__mro__):
        return cls(response=value)
    if isinstance(value, dict):
        return cls(**value)
    raise ValueError(f"--answer {value!r} for {name}: give its fields as a JSON object")


def _snapshot(ctx: Any) -> Any:
    """The context's snapshot, taken without the integration's ``before:checkpoint`` point."""
    to_dict = type(ctx).to_dict
    return getattr(to_dict, "__wrapped__", to_dict)(ctx)


def _answer(handler: Any, sent: set[str]) -> int:
    """Send an answer to each wait not answered yet by this handler; how many were sent."""
    try:
        snapshot = _snapshot(handler.ctx)
    except Exception:  # a run not started yet has no snapshot to read: nothing waits
        return 0
    waits = [w for w in pending_waits(snapshot) if w[0] not in sent]
    if not waits:
        return 0
    values = _answers.answers_for([w[0] for w in waits])
    if values is None:
        _answers.none_left("llama_index", f"{len(waits)} wait(s) for {waits[0][1]}")
        return 0
    for (waiter_id, qualified), value in zip(waits, values, strict=True):
        sent.add(waiter_id)
        handler.ctx.send_event(event_for(qualified, value))
    return len(waits)


async def answering(handler: Any, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """``events`` (the handler's stream) with every wait answered as it appears."""
    sent: set[str] = set()
    _answer(handler, sent)  # a resumed context: its waits were published by another process
    unseen = 0  # waits answered whose InputRequiredEvent the stream has not brought yet
    async for ev in events:
        unseen += _answer(handler, sent)
        if unseen and type(ev).__name__ == "InputRequiredEvent":
            unseen -= 1
            continue  # the person answered it: the driver's prompt is never reached
        yield ev
