"""What "the same logical effect" means: identities, grouping, volatile fields, unknown calls."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from killdrill.alloc import without_gc
from killdrill.points import ScheduleError, parse_fault
from killdrill.providers import spec
from killdrill.records import Attempt, Call, LedgerSnapshot
from killdrill.verdict.index import NAMED_BY_PAYLOAD, EffectNaming, ProviderFlags, grouping
from killdrill.verdict.matching import canonical, differing
from killdrill.verdict.matching_scale import match_calls

__all__ = [
    "STATE_VOLATILE",
    "EffectKey",
    "effect_calls",
    "effect_identity",
    "effect_key",
    "group_effects",
    "is_convergent",
    "op_name",
    "summarize",
    "unknown_calls",
    "volatile_fields",
]

EffectKey = tuple[str, str, str]
"""``(provider, op, canonical identity)``: what "the same logical effect" means."""

STATE_VOLATILE = "kv.state"
"""Entry of :func:`volatile_fields` naming final-state keys whose values differed between
two clean runs; those keys are left out of the state comparison."""

_SUMMARY_FIELDS = ("exactly_once", "duplicated", "lost", "unexpected")


def op_name(provider: str, op: str) -> str:
    return f"{provider}.{op}"


def is_convergent(provider: str) -> bool:
    """Idempotent writes (declared ``convergent``): repeating one converges, so they are judged on
    the final state (``state_diverged``), never counted as duplicates."""
    return spec(provider).convergent


def effect_identity(
    provider: str, op: str, payload: Mapping[str, Any], naming: EffectNaming = NAMED_BY_PAYLOAD
) -> dict[str, Any]:
    """The fields that name a logical effect: the configured ones for this op, else the
    payload minus its volatile fields (see :class:`EffectNaming`)."""
    return naming.identity_of(provider, op, payload)


def effect_key(call: Call, naming: EffectNaming = NAMED_BY_PAYLOAD) -> EffectKey:
    """The logical effect a call belongs to."""
    return (call.provider, call.op, canonical(naming.identity_of(call.provider, call.op, call.payload)))


def effect_calls(calls: Iterable[Call]) -> list[Call]:
    """The calls that can be effects: a call-only provider's (the model's answers) are work."""
    flags = ProviderFlags()
    return [c for c in calls if not flags.call_only(c.provider)]


def group_effects(
    calls: Iterable[Call], naming: EffectNaming = NAMED_BY_PAYLOAD
) -> dict[EffectKey, list[Call]]:
    """Calls grouped by logical effect, groups in order of first call, calls in ledger order
    (a copy of :func:`killdrill.verdict.index.grouping`'s, which computes each key once)."""
    return {k: list(v) for k, v in grouping(calls, naming).groups.items()}


@without_gc
def volatile_fields(a: LedgerSnapshot, b: LedgerSnapshot) -> dict[str, list[str]]:
    """Per ``provider.op``, the payload fields whose values differ between two clean runs.

    The calls of each op are *matched* by content (:func:`killdrill.verdict.matching_scale.match_calls`),
    never paired by ledger order: three parallel payouts that land in another order are still
    three payees, and ``account`` is not volatile because of it.  A field is volatile only if it
    differs within a matched pair; a call with no counterpart (unequal counts) says nothing.
    Final-state keys that differ are named under :data:`STATE_VOLATILE`.
    """
    by_op: dict[str, tuple[list[Call], list[Call]]] = {}
    for side, snap in enumerate((a, b)):
        for call in effect_calls(snap.calls):
            by_op.setdefault(op_name(call.provider, call.op), ([], []))[side].append(call)
    out: dict[str, list[str]] = {}
    for name, (left, right) in by_op.items():
        fields: set[str] = set()
        for x, y in match_calls(left, right):
            fields.update(differing(x.payload, y.payload))
        if fields:
            out[name] = sorted(fields)
    state = sorted(differing(a.state, b.state))
    if state:
        out[STATE_VOLATILE] = state
    return out


def unknown_calls(calls: Iterable[Call], attempts: Sequence[Attempt]) -> dict[int, str]:
    """Calls whose response the caller never received: ``seq -> the point that cut it``.

    An attempt killed exactly at ``during:PROVIDER.OP#N`` (no delay) lost the response of its
    N-th call of that op.  A delayed kill (``+Xms``) may or may not have, so it is not marked.
    """
    cuts: list[tuple[Attempt, str, int, str]] = []  # (attempt, provider.op, occurrence, killed at)
    for att in attempts:
        if not att.killed_at:
            continue
        try:
            kill = parse_fault(att.killed_at)
        except ScheduleError:
            continue
        if kill.kind != "during" or not kill.is_named or kill.point is None:
            continue
        cuts.append((att, kill.point.split(":", 1)[1], kill.occurrence, att.killed_at))
    if not cuts:  # no call's response was cut: the ledger need not be read (10^5 calls)
        return {}
    wanted = {(att.number, op) for att, op, _, _ in cuts}
    by_attempt: dict[tuple[int, str], list[Call]] = {}
    for call in sorted(calls, key=lambda c: c.seq):
        at = (call.attempt, op_name(call.provider, call.op))
        if at in wanted:
            by_attempt.setdefault(at, []).append(call)
    out: dict[int, str] = {}
    for att, op, occurrence, point in cuts:
        mine = by_attempt.get((att.number, op), [])
        if 0 < occurrence <= len(mine):
            out[mine[occurrence - 1].seq] = point
    return out


@without_gc
def summarize(
    baseline: LedgerSnapshot, case: LedgerSnapshot, naming: EffectNaming = NAMED_BY_PAYLOAD
) -> dict[str, dict[str, int]]:
    """Per provider, how many logical effects landed exactly once, more, fewer, or unasked.

    For convergent providers (kv) repeating a write is not a duplicate: any landing counts once.
    """
    base = grouping(baseline.calls, naming).groups
    mine = grouping(case.calls, naming).groups
    flags = ProviderFlags()
    out: dict[str, dict[str, int]] = {}

    def landed(calls: list[Call] | None) -> int:
        if not calls:
            return 0
        if len(calls) == 1:  # most effects of a big batch: no generator
            return 1 if calls[0].landed else 0
        return sum(c.landed for c in calls)

    # the provider's flags looked up once per provider, not once per effect (a batch's 10^5)
    rows = [(key[0], landed(calls), landed(base.get(key))) for key, calls in mine.items()]
    rows += [(key[0], 0, landed(calls)) for key, calls in base.items() if key not in mine]
    convergent: dict[str, bool] = {}
    for provider, n, b in rows:
        if provider not in convergent:
            convergent[provider] = flags.convergent(provider)
        if convergent[provider]:
            n, b = min(n, 1), min(b, 1)
        if n == 0 and b == 0:
            continue
        field = "unexpected" if b == 0 else "exactly_once" if n == b else "duplicated" if n > b else "lost"
        counts = out.get(provider)
        if counts is None:
            counts = out[provider] = dict.fromkeys(_SUMMARY_FIELDS, 0)
        counts[field] += 1
    return out
