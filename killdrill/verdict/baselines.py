"""What a case is judged against, and whether its evidence survived.

Three questions a verdict must settle before it counts effects:

- does the work depend on the thread?  Two clean runs under two threads that reach different
  points or land a different number of effects mean it does; each case is then judged against
  a clean run of its own thread (:func:`workload_difference`), unless that run, made after the
  case under the case's thread, found the thread's work already done (:func:`found_done`);
- is the case's ledger still the one it started with?  An agent that deletes, truncates or
  recreates it erases the very calls a verdict needs, and a repeated charge then looks like the
  first one (:func:`ledger_break`);
- did a resumed attempt repeat an earlier attempt's calls (the only time re-entering at the
  first step is worth a note, :func:`repeated_calls`)?
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from killdrill.records import Call, LedgerSnapshot
from killdrill.verdict import canonical, effect_calls, is_convergent

__all__ = [
    "LEDGER_MARKER",
    "found_done",
    "landed_counts",
    "ledger_break",
    "repeated_calls",
    "workload_difference",
]

LEDGER_MARKER = "killdrill.case"
"""Settings entry the harness writes into a case's ledger before attempt 1; a ledger without it
at the end was recreated under the case."""


def landed_counts(snap: LedgerSnapshot) -> Counter[str]:
    """``provider.op`` -> effects landed (created calls)."""
    return Counter(f"{c.provider}.{c.op}" for c in snap.calls if c.landed)


def _landed_effects(snap: LedgerSnapshot) -> Counter[str]:
    """:func:`landed_counts` of the calls that can be effects (a model's answers are work)."""
    return Counter(f"{c.provider}.{c.op}" for c in effect_calls(snap.calls) if c.landed)


def found_done(shared: LedgerSnapshot, case: LedgerSnapshot, own: LedgerSnapshot) -> str:
    """Why the clean run of a case's own thread, made after the case, is no clean run of that
    thread but a run that found the thread's work already done, or ``""``.

    It landed no effect where the shared baseline landed some, while the case, under that very
    thread, landed each ``provider.op`` of the shared baseline at least as often: the thread does
    that work, and its clean run did none of it because it found the case's run finished.  That
    is the agent's state kept outside the workdir, by thread (a runtime's server, a database that
    every run shares): the new run attached to the case's.  Judged against it, every effect of
    the case would be unexpected; the shared baseline is the yardstick then.  A thread whose own
    work is smaller makes its case land less than the shared baseline too: that is not this."""
    base = _landed_effects(shared)
    if not base or _landed_effects(own):
        return ""
    mine = landed_counts(case)
    if any(mine[op] < n for op, n in base.items()):
        return ""
    did = ", ".join(f"{op} {mine[op]}" for op in sorted(base))
    return (
        "the clean run of the case's own thread landed no effect, while the case under that thread"
        f" landed all the shared baseline's ({did}): that run found the thread's work already done"
        " (the agent keeps its state outside the workdir, by thread: a runtime's server or a database"
        " every run shares), so it is no yardstick"
    )


def workload_difference(
    a_labels: Sequence[str], a: LedgerSnapshot, b_labels: Sequence[str], b: LedgerSnapshot
) -> str:
    """How two clean runs did different work (effect counts per op, points reached), or ``""``."""
    parts: list[str] = []
    ca, cb = landed_counts(a), landed_counts(b)
    for op in sorted(set(ca) | set(cb)):
        if ca[op] != cb[op]:
            parts.append(f"{op} landed {ca[op]} vs {cb[op]} times")
    set_a, set_b = set(a_labels), set(b_labels)  # once, not per label: 10^4 points took 22 s
    only_a = [lb for lb in a_labels if lb not in set_b]
    only_b = [lb for lb in b_labels if lb not in set_a]
    for name, only in (("first", only_a), ("second", only_b)):
        if only:
            shown = ", ".join(only[:4]) + (f" +{len(only) - 4}" if len(only) > 4 else "")
            parts.append(f"only the {name} reached {shown}")
    return "; ".join(parts)


def _call_id(c: Call) -> tuple[int, str, str, str | None, int]:
    return (c.seq, c.provider, c.op, c.key, c.attempt)


def ledger_break(before: LedgerSnapshot | None, after: LedgerSnapshot, marked: bool) -> str:
    """Why the ledger read after an attempt cannot be the one read before it, or ``""``.

    Calls are only ever appended: every call seen before must still be there, unchanged, and the
    harness's marker too.  Anything else means the ledger was deleted, truncated or recreated.
    """
    if not marked:
        return "the harness's marker is gone: the ledger was deleted or recreated"
    if before is None:
        return ""
    now = {_call_id(c) for c in after.calls}
    lost = [c for c in before.calls if _call_id(c) not in now]
    if lost:
        first = lost[0]
        return (
            f"{len(lost)} call(s) recorded earlier are gone (first: #{first.seq} {first.provider}.{first.op}"
            f" of attempt {first.attempt}): the ledger was deleted, truncated or recreated"
        )
    return ""


def repeated_calls(snap: LedgerSnapshot, attempt: int) -> list[Call]:
    """Calls of ``attempt`` that repeat a call an earlier attempt made (same provider, op and
    payload, or same key): a resumed attempt that re-did work instead of skipping it."""
    earlier_keys: set[tuple[str, str]] = set()
    earlier_payloads: set[tuple[str, str, str]] = set()
    # a repeated set converges; a model asked again is re-spent work, not an effect re-done
    calls = [c for c in effect_calls(snap.calls) if not is_convergent(c.provider)]
    for c in calls:
        if c.attempt < attempt:
            if c.key is not None:
                earlier_keys.add((c.provider, c.key))
            earlier_payloads.add((c.provider, c.op, canonical(c.payload)))
    return [
        c
        for c in calls
        if c.attempt == attempt
        and (
            (c.key is not None and (c.provider, c.key) in earlier_keys)
            or (c.provider, c.op, canonical(c.payload)) in earlier_payloads
        )
    ]
