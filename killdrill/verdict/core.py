"""The core checks: each logical effect lands as often as in the baseline, under one key that
names one payload, the final state matches, and no key is left in flight."""

from __future__ import annotations

from typing import Any

from killdrill.records import (
    DUPLICATE_EFFECT,
    KEY_CHANGED,
    KEY_REUSED,
    MISSING_EFFECT,
    STATE_DIVERGED,
    STUCK_IN_FLIGHT,
    UNEXPECTED_EFFECT,
    Call,
    Violation,
)
from killdrill.verdict.checks import CheckContext, Effect, check
from killdrill.verdict.grouping import STATE_VOLATILE, effect_calls, effect_identity, is_convergent, op_name
from killdrill.verdict.lookups import held_calls, kv_writes, nearest_baseline_phrase
from killdrill.verdict.matching import canonical, differing
from killdrill.verdict.phrases import (
    call_phrase,
    calls_detail,
    calls_phrase,
    distinct_keys,
    format_identity,
    key_change_scope,
    key_changes,
    runtime_attempts,
    short,
    times,
    why_duplicated,
)
from killdrill.verdict.value_diff import value_diff

__all__ = [
    "duplicate_effect",
    "key_changed",
    "key_reused",
    "missing_effect",
    "state_diverged",
    "stuck_in_flight",
    "unexpected_effect",
]


@check(UNEXPECTED_EFFECT, per_effect=True, quiet_on_plain=True)
def unexpected_effect(ctx: CheckContext, effect: Effect) -> list[Violation]:
    """An effect that landed although the baseline never made it."""
    landed, b = effect.landed, effect.baseline_landed
    if is_convergent(effect.provider) or not landed or b:
        return []
    message = (
        f"{effect.name} landed {times(len(landed))} but is not in the baseline: "
        f"{calls_phrase(landed, ctx.unknown)}" + nearest_baseline_phrase(ctx, effect)
    )
    return [ctx.violation(UNEXPECTED_EFFECT, message, effect)]


@check(DUPLICATE_EFFECT, per_effect=True, quiet_on_plain=True)
def duplicate_effect(ctx: CheckContext, effect: Effect) -> list[Violation]:
    """An effect that landed more often than in the baseline (and the baseline has it)."""
    landed, b = effect.landed, effect.baseline_landed
    if is_convergent(effect.provider) or not b or len(landed) <= b:
        return []
    message = (
        f"{effect.name} landed {times(len(landed))} (baseline {b}): {calls_phrase(landed, ctx.unknown)}"
        f" — {why_duplicated(landed)}"
    )
    runtime, contexts = runtime_attempts(landed)
    if not runtime:
        return [ctx.violation(DUPLICATE_EFFECT, message, effect)]
    message += f" (landed by {runtime})"  # the runtime's own retries: an activity's attempts
    numbers = [c["context"].get("attempt") for c in contexts]
    extra = {"runtime": runtime, "runtime_attempts": numbers, "runtime_calls": contexts}
    return [ctx.violation(DUPLICATE_EFFECT, message, effect, **extra)]


@check(MISSING_EFFECT, per_effect=True, quiet_on_plain=True)
def missing_effect(ctx: CheckContext, effect: Effect) -> list[Violation]:
    """An effect that landed less often than in the baseline."""
    n, b = len(effect.landed), effect.baseline_landed
    if is_convergent(effect.provider) or n >= b:
        return []
    tried = f": {calls_phrase(effect.calls, ctx.unknown)}" if effect.calls else ": no call was made"
    head = "never landed" if n == 0 else f"landed {times(n)}"
    return [ctx.violation(MISSING_EFFECT, f"{effect.name} {head} (baseline {b}){tried}", effect)]


@check(KEY_CHANGED, per_effect=True, quiet_on_plain=True)
def key_changed(ctx: CheckContext, effect: Effect) -> list[Violation]:
    """One effect sent under more keys than the baseline used, or with and without a key."""
    calls = effect.calls
    keys = distinct_keys(calls)
    bkeys = distinct_keys(effect.baseline)
    keyless = [c for c in calls if c.key is None]
    too_many = len(keys) > max(1, len(bkeys))
    dropped = bool(keys) and bool(keyless) and not any(c.key is None for c in effect.baseline)
    if not (too_many or dropped):
        return []
    changes = key_changes(calls)
    where = ", ".join(
        f"attempt {ch['attempt']} {ch['from'] or '(no key)'} -> {ch['to'] or '(no key)'}" for ch in changes
    )
    what = f"used {len(keys)} idempotency keys" if too_many else "was sent with and without a key"
    base_note = f", baseline {len(bkeys)}" if len(bkeys) > 1 else ""
    n, b = len(effect.landed), effect.baseline_landed
    scope = key_change_scope(calls)
    scope = "across attempts" if scope == "between attempts" else scope
    message = f"{effect.name} {what} {scope}{base_note} (landed {times(n)}, baseline {b}): {where}"
    return [
        ctx.violation(
            KEY_CHANGED, message, effect, distinct_keys=keys, baseline_keys=len(bkeys), changes=changes
        )
    ]


@check(KEY_REUSED)
def key_reused(ctx: CheckContext) -> list[Violation]:
    """One key under different payloads: keys are scoped per provider, so the op is part of what
    must not change.  Checked on the payload as sent, volatile fields included: a field that
    legitimately differs between two runs (a timestamp, a model's wording) must still not change
    under one key within a run (a provider refuses it; a re-stamped ``sent_at`` is a bug), and a
    configured identity does not hide an amount recomputed on replay either."""
    by_key: dict[tuple[str, str], list[Call]] = {}
    for call in sorted(effect_calls(ctx.case.calls), key=lambda c: c.seq):
        if call.key is not None:
            by_key.setdefault((call.provider, call.key), []).append(call)
    out: list[Violation] = []
    for (provider, key), calls in by_key.items():
        if len(calls) < 2:  # one call is one payload (and the canonical forms are the cost)
            continue
        forms: dict[str, dict[str, Any]] = {}
        for c in calls:
            forms.setdefault(canonical([c.op, c.payload]), {"op": c.op, **c.payload})
        if len(forms) < 2:
            continue
        variants = list(forms.values())
        first = variants[0]
        differs = sorted(set().union(*(differing(first, v) for v in variants[1:])))
        phrase = ", ".join(
            f"{call_phrase(c, ctx.unknown)} {c.op} {format_identity(c.payload)}" for c in calls[:4]
        )
        rejected = any(c.outcome == "rejected" for c in calls)
        why = "the payload changed under the same key" + (" (recomputed on replay?)" if rejected else "")
        volatile = set(ctx.naming.volatile.get(op_name(provider, calls[0].op), ()))
        drifting = [f for f in differs if f in volatile]
        if drifting:
            why += (
                f"; {', '.join(drifting)} varies between clean runs: compute it once, checkpoint it"
                " and send the same value on replay"
            )
        ident = effect_identity(calls[0].provider, calls[0].op, calls[0].payload, ctx.naming)
        out.append(
            Violation(
                kind=KEY_REUSED,
                message=f"{provider} key {key} was used for {len(forms)} different effects: {phrase}"
                f" — {why}; differs in {', '.join(differs)}",
                provider=provider,
                op=calls[0].op,
                identity=ident,
                calls=tuple(calls),
                detail={
                    "key": key,
                    "effects": variants,
                    "differs": differs,
                    "attempts": sorted({c.attempt for c in calls}),
                    "calls": calls_detail(calls, ctx.unknown),
                    "refused": rejected,  # the provider refused the replay: the payload changed under it
                    "volatile": drifting,  # differing fields that vary between clean runs
                },
            )
        )
    return out


@check(STATE_DIVERGED)
def state_diverged(ctx: CheckContext) -> list[Violation]:
    """Final kv state against the baseline's: an increment disguised as a set ends elsewhere."""
    baseline, case = ctx.baseline, ctx.case
    skip = set(ctx.naming.volatile.get(STATE_VOLATILE, ()))
    out: list[Violation] = []
    missing = object()
    for k in dict.fromkeys([*baseline.state, *case.state]):
        if k in skip:
            continue
        want, got = baseline.state.get(k, missing), case.state.get(k, missing)
        if want is not missing and got is not missing and canonical(want) == canonical(got):
            continue
        if got is missing:
            msg = f"kv {k!r} is missing at the end (baseline {short(want)})"
        elif want is missing:
            msg = f"kv {k!r} ended as {short(got)} but the baseline never set it"
        else:
            msg = f"kv {k!r} ended as {value_diff(want, got)}"
        writes = kv_writes(ctx, k)
        if writes:
            msg += f": written by {', '.join(f'attempt {c.attempt}' for c in writes[:6])}"
        out.append(
            Violation(
                kind=STATE_DIVERGED,
                message=msg,
                provider=writes[0].provider if writes else "kv",
                op=writes[0].op if writes else None,
                identity={"key": k},
                calls=writes,
                detail={
                    "key": k,
                    "value": None if got is missing else got,
                    "baseline": None if want is missing else want,
                    "present": got is not missing,
                    "in_baseline": want is not missing,
                },
            )
        )
    return out


@check(STUCK_IN_FLIGHT)
def stuck_in_flight(ctx: CheckContext) -> list[Violation]:
    """A key claimed at a provider and never completed: the caller gave up on an ambiguous call."""
    out: list[Violation] = []
    for f in ctx.case.in_flight:
        held = held_calls(ctx, f.provider, f.key)
        out.append(
            Violation(
                kind=STUCK_IN_FLIGHT,
                message=f"{f.provider}.{f.op} key {f.key} is still in flight at the end"
                f" (claimed by attempt {f.attempt}, never completed)",
                provider=f.provider,
                op=f.op,
                calls=held,
                detail={"key": f.key, "attempt": f.attempt, "since": f.since},
            )
        )
    return out
