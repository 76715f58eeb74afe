"""The work submitted again under a new id: an effect made by a run of a durable runtime (a
workflow, a task) that a clean run does not have, because the request that starts the run was
sent again (a client's retry of a non-idempotent ``POST``, a re-run driver) and the server gave
it a new id instead of attaching it to the run already started.

Read from the calls' runtime context only (``killdrill.agent.in_runtime``: ``runtime``,
``unit``, ``name`` and ``run``, the id of the run the unit belongs to) and the attempts: which
process made each call, where the kill landed, whether the driver was re-run."""

from __future__ import annotations

from collections.abc import Sequence

from killdrill.records import DUPLICATE_EFFECT, KEY_CHANGED, Attempt, Call, LedgerSnapshot, Violation

__all__ = ["resubmitted_story"]

_Unit = tuple[str, str, str]  # (runtime, unit, name)


def _unit(call: Call) -> tuple[_Unit, str] | None:
    ctx = call.context or {}
    run = ctx.get("run")
    if not isinstance(run, str) or not run:
        return None
    return (str(ctx.get("runtime", "")), str(ctx.get("unit", "")), str(ctx.get("name", ""))), run


def _runs(calls: Sequence[Call], unit: _Unit) -> dict[str, Call]:
    """The runs that did ``unit``, in the order they first made a call: run -> its first call."""
    out: dict[str, Call] = {}
    for c in sorted(calls, key=lambda c: c.seq):
        found = _unit(c)
        if found is not None and found[0] == unit and found[1] not in out:
            out[found[1]] = c
    return out


def _who(number: int, attempts: Sequence[Attempt]) -> str:
    a = next((a for a in attempts if a.number == number), None)
    return f"attempt {number} ({a.process})" if a is not None and a.process else f"attempt {number}"


def _sender(attempts: Sequence[Attempt]) -> str:
    """Who sent the work again, as far as the attempts tell."""
    kills = [a for a in attempts if a.killed_at]
    after = f" after the kill at {kills[0].killed_at} ({_who(kills[0].number, attempts)})" if kills else ""
    drivers = [a.number for a in attempts if a.process == "driver"]
    if len(drivers) > 1:
        return f"submitted again{after}: the driver was re-run (attempts {', '.join(map(str, drivers))})"
    if drivers:
        return (
            f"submitted again{after}: the driver ran once (attempt {drivers[0]}), so its own retry re-sent"
            " the request"
        )
    return f"submitted again{after}"


def resubmitted_story(
    v: Violation, attempts: Sequence[Attempt], ledger: LedgerSnapshot | None, baseline: LedgerSnapshot
) -> str | None:
    """What was observed when ``v``'s calls come from a run that a clean run has no counterpart
    of (the case ran their unit in more runs than the clean run did); None otherwise.  A
    duplicate qualifies only when its landed calls come from different runs."""
    if ledger is None:
        return None
    landed = [(c, found) for c in v.calls if c.landed and (found := _unit(c)) is not None]
    if v.kind in (DUPLICATE_EFFECT, KEY_CHANGED) and len({run for _, (_, run) in landed}) < 2:
        return None
    for call, (unit, run) in landed:
        runs, base = _runs(ledger.calls, unit), _runs(baseline.calls, unit)
        if not base or len(runs) <= len(base):
            continue
        runtime, kind, name = unit
        extra = list(runs)[len(base) :]
        first = runs[extra[0]]
        ids = ", ".join(list(runs)[:4]) + (", ..." if len(runs) > 4 else "")
        made = _who(call.attempt, attempts)
        return (
            f"{v.provider}.{v.op} was made by {runtime} {kind} {name} of run {run} ({made});"
            f" this case ran {name} in {len(runs)} runs ({ids}) where a clean run has {len(base)}: the same"
            f" work was {_sender(attempts)}, and {_who(first.attempt, attempts)} started it under a new id"
            f" ({extra[0]})"
        )
    return None
