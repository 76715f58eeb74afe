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
    """The runs that did ``unit``, in the order the runs began (their first call of any unit of
    the runtime): run -> that first call."""
    first: dict[str, Call] = {}
    did: set[str] = set()
    for c in sorted(calls, key=lambda c: c.seq):
        found = _unit(c)
        if found is None or found[0][0] != unit[0]:
            continue
        first.setdefault(found[1], c)
        if found[0] == unit:
            did.add(found[1])
    return {run: c for run, c in first.items() if run in did}


def _who(number: int, attempts: Sequence[Attempt]) -> str:
    a = next((a for a in attempts if a.number == number), None)
    return f"attempt {number}, {a.process}" if a is not None and a.process else f"attempt {number}"


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
        new = list(runs)[len(base)]
        began = _who(runs[new].attempt, attempts)
        return (
            f"{v.provider}.{v.op} was made by {runtime} {kind} {name} in run {run}"
            f" ({_who(call.attempt, attempts)}); this case ran {name} in {len(runs)} runs where a clean run"
            f" has {len(base)}: {'this run' if new == run else f'run {new}'} is new (its first call:"
            f" {began}); the same work was"
            f" {_sender(attempts)}"
        )
    return None
