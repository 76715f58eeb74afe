"""The oracle: a case's ledger against the baseline ledger, per logical effect.

Delivery cannot be exactly-once, so the verdict never counts calls: it counts *effects*.
A logical effect is ``(provider, op, identity)``; the identity is the canonical payload
without the fields that legitimately vary between two clean runs (a model's wording, a
timestamp: found by matching the two runs' calls by content, never by ledger order, see
:mod:`killdrill.matching`), or the fields a user pins per op (``{"payments.charge": ["account_id",
"billing_cycle"]}``).  An effect "landed" when a call's outcome is ``created``; replays,
rejections and conflicts are evidence about keys, not effects.

Calls are modelled as Jepsen does: a call whose attempt was killed at ``during:PROVIDER.OP``
right after it is *unknown* to the caller (the provider did it, the caller never heard).
Such a call is fine as long as the effect still lands exactly once in the end; the report
marks it ("response lost") because that is where a retry with a fresh key goes wrong.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

from killdrill.matching import canonical  # one canonical form for the verdict and the matching
from killdrill.matching import differing as _differing
from killdrill.points import ScheduleError, parse_kill
from killdrill.records import (
    CALL_ONLY_PROVIDERS,
    COMPENSATION_ORDER,
    DUPLICATE_EFFECT,
    KEY_CHANGED,
    KEY_REUSED,
    MISSING_EFFECT,
    STATE_DIVERGED,
    STUCK_IN_FLIGHT,
    UNEXPECTED_EFFECT,
    Attempt,
    Call,
    LedgerSnapshot,
    Violation,
)
from killdrill.value_diff import value_diff

__all__ = [
    "CHECKS",
    "CONVERGENT_PROVIDERS",
    "STATE_VOLATILE",
    "EffectKey",
    "canonical",
    "compensation_order",
    "effect_calls",
    "effect_identity",
    "effect_key",
    "format_identity",
    "group_effects",
    "judge",
    "summarize",
    "unknown_calls",
    "volatile_fields",
]

EffectKey = tuple[str, str, str]
"""``(provider, op, canonical identity)``: what "the same logical effect" means."""

CONVERGENT_PROVIDERS = frozenset({"kv"})
"""Idempotent writes: repeating one converges, so they are judged on the final state
(``state_diverged``), never counted as duplicates."""

STATE_VOLATILE = "kv.state"
"""Entry of :func:`volatile_fields` naming final-state keys whose values differed between
two clean runs; those keys are left out of the state comparison."""

_SUMMARY_FIELDS = ("exactly_once", "duplicated", "lost", "unexpected")


def _op_name(provider: str, op: str) -> str:
    return f"{provider}.{op}"


def effect_identity(
    provider: str,
    op: str,
    payload: Mapping[str, Any],
    *,
    identity: Mapping[str, Sequence[str]] | None = None,
    volatile: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The fields that name a logical effect: the configured ones for this op, else the
    payload minus its volatile fields."""
    name = _op_name(provider, op)
    if identity and name in identity:
        return {f: payload[f] for f in identity[name] if f in payload}
    skip = set(volatile.get(name, ())) if volatile else set()
    return {k: v for k, v in payload.items() if k not in skip}


def effect_key(
    call: Call,
    *,
    identity: Mapping[str, Sequence[str]] | None = None,
    volatile: Mapping[str, Sequence[str]] | None = None,
) -> EffectKey:
    """The logical effect a call belongs to."""
    ident = effect_identity(call.provider, call.op, call.payload, identity=identity, volatile=volatile)
    return (call.provider, call.op, canonical(ident))


def effect_calls(calls: Iterable[Call]) -> list[Call]:
    """The calls that can be effects: a model's answers are work, never judged for exactly-once."""
    return [c for c in calls if c.provider not in CALL_ONLY_PROVIDERS]


def group_effects(
    calls: Iterable[Call],
    *,
    identity: Mapping[str, Sequence[str]] | None = None,
    volatile: Mapping[str, Sequence[str]] | None = None,
) -> dict[EffectKey, list[Call]]:
    """Calls grouped by logical effect, groups in order of first call, calls in ledger order."""
    out: dict[EffectKey, list[Call]] = {}
    for call in sorted(effect_calls(calls), key=lambda c: c.seq):
        out.setdefault(effect_key(call, identity=identity, volatile=volatile), []).append(call)
    return out


def volatile_fields(a: LedgerSnapshot, b: LedgerSnapshot) -> dict[str, list[str]]:
    """Per ``provider.op``, the payload fields whose values differ between two clean runs.

    The calls of each op are *matched* by content (:func:`killdrill.matching.match_calls`),
    never paired by ledger order: three parallel payouts that land in another order are still
    three payees, and ``account`` is not volatile because of it.  A field is volatile only if it
    differs within a matched pair; a call with no counterpart (unequal counts) says nothing.
    Final-state keys that differ are named under :data:`STATE_VOLATILE`.
    """
    from killdrill.matching import match_calls

    by_op: dict[str, tuple[list[Call], list[Call]]] = {}
    for side, snap in enumerate((a, b)):
        for call in effect_calls(snap.calls):
            by_op.setdefault(_op_name(call.provider, call.op), ([], []))[side].append(call)
    out: dict[str, list[str]] = {}
    for name, (left, right) in by_op.items():
        fields: set[str] = set()
        for x, y in match_calls(left, right):
            fields.update(_differing(x.payload, y.payload))
        if fields:
            out[name] = sorted(fields)
    state = sorted(_differing(a.state, b.state))
    if state:
        out[STATE_VOLATILE] = state
    return out


def unknown_calls(calls: Iterable[Call], attempts: Sequence[Attempt]) -> dict[int, str]:
    """Calls whose response the caller never received: ``seq -> the point that cut it``.

    An attempt killed exactly at ``during:PROVIDER.OP#N`` (no delay) lost the response of its
    N-th call of that op.  A delayed kill (``+Xms``) may or may not have, so it is not marked.
    """
    by_attempt: dict[tuple[int, str], list[Call]] = {}
    for call in sorted(calls, key=lambda c: c.seq):
        by_attempt.setdefault((call.attempt, _op_name(call.provider, call.op)), []).append(call)
    out: dict[int, str] = {}
    for att in attempts:
        if not att.killed_at:
            continue
        try:
            kill = parse_kill(att.killed_at)
        except ScheduleError:
            continue
        if kill.kind != "during" or not kill.is_named or kill.point is None:
            continue
        mine = by_attempt.get((att.number, kill.point.split(":", 1)[1]), [])
        if 0 < kill.occurrence <= len(mine):
            out[mine[kill.occurrence - 1].seq] = att.killed_at
    return out


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else canonical(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_identity(ident: Mapping[str, Any] | None) -> str:
    """``{account_id: acme, amount: 4200}``: readable, sorted, long values cut."""
    if not ident:
        return "{}"
    return "{" + ", ".join(f"{k}: {_short(ident[k])}" for k in sorted(ident)) + "}"


def _times(n: int) -> str:
    return "1 time" if n == 1 else f"{n} times"


def _call_phrase(call: Call, unknown: Mapping[int, str]) -> str:
    key = call.key if call.key is not None else "(no key)"
    text = f"attempt {call.attempt} key {key} {call.outcome}"
    if call.seq in unknown:
        text += " (response lost)"
    return text


def _calls_phrase(calls: Sequence[Call], unknown: Mapping[int, str], limit: int = 4) -> str:
    parts = [_call_phrase(c, unknown) for c in calls[:limit]]
    if len(calls) > limit:
        parts.append(f"+{len(calls) - limit} more")
    return ", ".join(parts)


def _distinct_keys(calls: Iterable[Call]) -> list[str]:
    return list(dict.fromkeys(c.key for c in calls if c.key is not None))


def _key_changes(calls: Sequence[Call]) -> list[dict[str, Any]]:
    """Where, in ledger order, a call's key differs from the previous call's."""
    out: list[dict[str, Any]] = []
    for prev, cur in pairwise(calls):
        if cur.key != prev.key:
            out.append({"seq": cur.seq, "attempt": cur.attempt, "from": prev.key, "to": cur.key})
    return out


def _why_duplicated(landed: Sequence[Call]) -> str:
    keys = [c.key for c in landed]
    if all(k is None for k in keys):
        return "sent without an idempotency key"
    if any(k is None for k in keys):
        return "a call was sent without the idempotency key"
    if len(set(keys)) > 1:
        return "the key changed between attempts"
    return f"under the same key {keys[0]}: the provider did not dedupe it"


def _calls_detail(calls: Sequence[Call], unknown: Mapping[int, str]) -> list[dict[str, Any]]:
    return [
        {
            "seq": c.seq,
            "attempt": c.attempt,
            "key": c.key,
            "outcome": c.outcome,
            "replayed": c.replayed,
            "effect_id": c.effect_id,
            "response_lost": unknown.get(c.seq),  # the point that cut the response, or None
        }
        for c in calls
    ]


def _nearest_baseline(
    key: EffectKey,
    ident: Mapping[str, Any],
    baseline: Mapping[EffectKey, list[Call]],
    idents: Mapping[EffectKey, dict[str, Any]],
) -> str:
    """For an unexpected effect: the baseline effect of the same op it most resembles, and how."""
    best: tuple[int, dict[str, Any]] | None = None
    for other, calls in baseline.items():
        if other[:2] != key[:2] or not any(c.landed for c in calls):
            continue
        theirs = idents[other]
        diff = sorted(_differing(ident, theirs))
        if best is None or len(diff) < best[0]:
            best = (len(diff), {"identity": theirs, "differs": diff})
    if best is None:
        return ""
    return (
        f"; the baseline has {format_identity(best[1]['identity'])} instead"
        f" (differs in {', '.join(best[1]['differs'])})"
    )


def judge(
    baseline: LedgerSnapshot,
    case: LedgerSnapshot,
    attempts: Sequence[Attempt],
    *,
    identity: Mapping[str, Sequence[str]] | None = None,
    volatile: Mapping[str, Sequence[str]] | None = None,
    checks: Sequence[str] = (),
) -> list[Violation]:
    """Every way the case's effects differ from the baseline's, as stable-kind violations.

    Order: per logical effect in order of first appearance (count violations, then
    ``key_changed``), then ``key_reused``, ``state_diverged``, ``stuck_in_flight``.
    """
    base = group_effects(baseline.calls, identity=identity, volatile=volatile)
    mine = group_effects(case.calls, identity=identity, volatile=volatile)
    unknown = unknown_calls(case.calls, attempts)
    idents: dict[EffectKey, dict[str, Any]] = {}
    for key, calls in (*base.items(), *mine.items()):
        c = calls[0]
        idents[key] = effect_identity(c.provider, c.op, c.payload, identity=identity, volatile=volatile)

    out: list[Violation] = []
    for key in dict.fromkeys([*mine, *base]):
        provider, op, _ = key
        calls = mine.get(key, [])
        bcalls = base.get(key, [])
        ident = idents[key]
        name = f"{provider}.{op} {format_identity(ident)}"
        landed = [c for c in calls if c.landed]
        n, b = len(landed), sum(c.landed for c in bcalls)
        detail: dict[str, Any] = {
            "landed": n,
            "baseline": b,
            "keys": [c.key for c in calls],
            "attempts": sorted({c.attempt for c in calls}),
            "calls": _calls_detail(calls, unknown),
        }

        def add(kind: str, message: str, *, _key: EffectKey = key, _detail: dict[str, Any] = detail) -> None:
            out.append(
                Violation(
                    kind=kind,
                    message=message,
                    provider=_key[0],
                    op=_key[1],
                    identity=idents[_key],
                    calls=tuple(mine.get(_key, [])),
                    detail=dict(_detail),
                )
            )

        if provider not in CONVERGENT_PROVIDERS:
            if n > b and b == 0:
                add(
                    UNEXPECTED_EFFECT,
                    f"{name} landed {_times(n)} but is not in the baseline: {_calls_phrase(landed, unknown)}"
                    + _nearest_baseline(key, ident, base, idents),
                )
            elif n > b:
                add(
                    DUPLICATE_EFFECT,
                    f"{name} landed {_times(n)} (baseline {b}): {_calls_phrase(landed, unknown)}"
                    f" — {_why_duplicated(landed)}",
                )
            elif n < b:
                tried = f": {_calls_phrase(calls, unknown)}" if calls else ": no call was made"
                head = "never landed" if n == 0 else f"landed {_times(n)}"
                add(MISSING_EFFECT, f"{name} {head} (baseline {b}){tried}")

        keys = _distinct_keys(calls)
        bkeys = _distinct_keys(bcalls)
        keyless = [c for c in calls if c.key is None]
        too_many = len(keys) > max(1, len(bkeys))
        dropped = bool(keys) and bool(keyless) and not any(c.key is None for c in bcalls)
        if too_many or dropped:
            changes = _key_changes(calls)
            where = ", ".join(
                f"attempt {ch['attempt']} {ch['from'] or '(no key)'} -> {ch['to'] or '(no key)'}"
                for ch in changes
            )
            what = f"used {len(keys)} idempotency keys" if too_many else "was sent with and without a key"
            base_note = f", baseline {len(bkeys)}" if len(bkeys) > 1 else ""
            add(
                KEY_CHANGED,
                f"{name} {what} across attempts{base_note} (landed {_times(n)}, baseline {b}): {where}",
                _detail={**detail, "distinct_keys": keys, "baseline_keys": len(bkeys), "changes": changes},
            )

    out.extend(_key_reuse(case, unknown, identity=identity, volatile=volatile))
    out.extend(_state_divergence(baseline, case, volatile))
    for f in case.in_flight:
        held = tuple(c for c in case.calls if c.provider == f.provider and c.key == f.key)
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
    if "compensation_order" in checks:
        out.extend(compensation_order(case))
    return out


def _key_reuse(
    case: LedgerSnapshot,
    unknown: Mapping[int, str],
    *,
    identity: Mapping[str, Sequence[str]] | None,
    volatile: Mapping[str, Sequence[str]] | None,
) -> list[Violation]:
    """One key under different payloads: keys are scoped per provider, so the op is part of what
    must not change.  Checked on the payload as sent, volatile fields included: a field that
    legitimately differs between two runs (a timestamp, a model's wording) must still not change
    under one key within a run (a provider refuses it; a re-stamped ``sent_at`` is a bug), and a
    configured identity does not hide an amount recomputed on replay either."""
    by_key: dict[tuple[str, str], list[Call]] = {}
    for call in sorted(effect_calls(case.calls), key=lambda c: c.seq):
        if call.key is not None:
            by_key.setdefault((call.provider, call.key), []).append(call)
    out: list[Violation] = []
    for (provider, key), calls in by_key.items():
        forms: dict[str, dict[str, Any]] = {}
        for c in calls:
            forms.setdefault(canonical([c.op, c.payload]), {"op": c.op, **c.payload})
        if len(forms) < 2:
            continue
        variants = list(forms.values())
        first = variants[0]
        differs = sorted(set().union(*(_differing(first, v) for v in variants[1:])))
        phrase = ", ".join(
            f"{_call_phrase(c, unknown)} {c.op} {format_identity(c.payload)}" for c in calls[:4]
        )
        rejected = any(c.outcome == "rejected" for c in calls)
        why = "the payload changed under the same key" + (" (recomputed on replay?)" if rejected else "")
        drifting = [f for f in differs if f in set((volatile or {}).get(_op_name(provider, calls[0].op), ()))]
        if drifting:
            why += (
                f"; {', '.join(drifting)} varies between clean runs: compute it once, checkpoint it"
                " and send the same value on replay"
            )
        ident = effect_identity(
            calls[0].provider, calls[0].op, calls[0].payload, identity=identity, volatile=volatile
        )
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
                    "calls": _calls_detail(calls, unknown),
                },
            )
        )
    return out


def _state_divergence(
    baseline: LedgerSnapshot, case: LedgerSnapshot, volatile: Mapping[str, Sequence[str]] | None
) -> list[Violation]:
    """Final kv state against the baseline's: an increment disguised as a set ends elsewhere."""
    skip = set(volatile.get(STATE_VOLATILE, ())) if volatile else set()
    out: list[Violation] = []
    missing = object()
    for k in dict.fromkeys([*baseline.state, *case.state]):
        if k in skip:
            continue
        want, got = baseline.state.get(k, missing), case.state.get(k, missing)
        if want is not missing and got is not missing and canonical(want) == canonical(got):
            continue
        if got is missing:
            msg = f"kv {k!r} is missing at the end (baseline {_short(want)})"
        elif want is missing:
            msg = f"kv {k!r} ended as {_short(got)} but the baseline never set it"
        else:
            msg = f"kv {k!r} ended as {value_diff(want, got)}"
        writes = tuple(
            c for c in case.calls if c.provider in CONVERGENT_PROVIDERS and c.payload.get("key") == k
        )
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


# Undo operations of the fakes, the action each undoes, and the payload field naming it.
UNDO_OPS: dict[tuple[str, str], tuple[tuple[str, str], str]] = {
    ("payments", "refund"): (("payments", "charge"), "charge_id"),
    ("inventory", "release"): (("inventory", "reserve"), "reservation_id"),
}
CHECKS = ("compensation_order",)
"""Opt-in checks beyond effect counting (``DrillOptions(checks=...)``, ``--check``)."""


def compensation_order(case: LedgerSnapshot) -> list[Violation]:
    """Undo operations must land in the reverse order of the actions they undo (a Saga's rule).

    Every effect can land exactly once with the compensations in the wrong order (stock freed
    while the charge still stands), which no count can see, and the clean run has the same
    order, so this is judged on the case alone.  Opt-in: a flow that releases reservations
    first-in-first-out as ordinary business, not as compensation, would be flagged.
    """
    landed_at: dict[tuple[str, str], int] = {}
    for c in case.calls:
        if c.landed and c.effect_id is not None:
            landed_at.setdefault((c.provider, c.effect_id), c.seq)
    undos: list[tuple[Call, int]] = []  # (undo call, seq of the action it undoes)
    seen: set[tuple[str, str]] = set()
    for c in sorted(case.calls, key=lambda c: c.seq):
        spec = UNDO_OPS.get((c.provider, c.op))
        if spec is None or not c.landed:
            continue
        (provider, _), field_name = spec
        target = c.payload.get(field_name)
        action_seq = landed_at.get((provider, str(target)))
        if action_seq is None or (provider, str(target)) in seen:
            continue
        seen.add((provider, str(target)))
        undos.append((c, action_seq))
    out: list[Violation] = []
    for (first, a1), (second, a2) in itertools.combinations(undos, 2):
        if a1 < a2:  # undone in the order done: the later action must be undone first
            out.append(
                Violation(
                    kind=COMPENSATION_ORDER,
                    message=(
                        f"{first.provider}.{first.op} (undoing the action of call #{a1}) landed before "
                        f"{second.provider}.{second.op} (undoing the later call #{a2}): compensations "
                        "must run in the reverse order of their actions"
                    ),
                    provider=first.provider,
                    op=first.op,
                    calls=(first, second),
                    detail={"undo_seqs": [first.seq, second.seq], "action_seqs": [a1, a2]},
                )
            )
    return out


def summarize(
    baseline: LedgerSnapshot,
    case: LedgerSnapshot,
    *,
    identity: Mapping[str, Sequence[str]] | None = None,
    volatile: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, dict[str, int]]:
    """Per provider, how many logical effects landed exactly once, more, fewer, or unasked.

    For convergent providers (kv) repeating a write is not a duplicate: any landing counts once.
    """
    base = group_effects(baseline.calls, identity=identity, volatile=volatile)
    mine = group_effects(case.calls, identity=identity, volatile=volatile)
    out: dict[str, dict[str, int]] = {}
    for key in dict.fromkeys([*mine, *base]):
        provider = key[0]
        n = sum(c.landed for c in mine.get(key, []))
        b = sum(c.landed for c in base.get(key, []))
        if provider in CONVERGENT_PROVIDERS:
            n, b = min(n, 1), min(b, 1)
        if n == 0 and b == 0:
            continue
        counts = out.setdefault(provider, dict.fromkeys(_SUMMARY_FIELDS, 0))
        if b == 0:
            counts["unexpected"] += 1
        elif n == b:
            counts["exactly_once"] += 1
        elif n > b:
            counts["duplicated"] += 1
        else:
            counts["lost"] += 1
    return out
