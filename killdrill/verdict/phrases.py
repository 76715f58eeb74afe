"""How the verdict's messages say things: identities, call lists, why a duplicate happened."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

from killdrill.providers import ROWS
from killdrill.records import Call
from killdrill.verdict.matching import canonical, differing

__all__ = [
    "call_phrase",
    "calls_detail",
    "calls_phrase",
    "distinct_keys",
    "format_identity",
    "is_row",
    "key_changes",
    "nearest_baseline",
    "runtime_attempts",
    "short",
    "times",
    "why_duplicated",
]


def short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else canonical(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_identity(ident: Mapping[str, Any] | None) -> str:
    """``{account_id: acme, amount: 4200}``: readable, sorted, long values cut."""
    if not ident:
        return "{}"
    return "{" + ", ".join(f"{k}: {short(ident[k])}" for k in sorted(ident)) + "}"


def times(n: int) -> str:
    return "1 time" if n == 1 else f"{n} times"


def is_row(call: Call) -> bool:
    """A row of the agent's own database (``--effect-table``), not a call to a provider."""
    return call.provider.startswith(ROWS)


def call_phrase(call: Call, unknown: Mapping[int, str], shared: bool = False) -> str:
    """One call: its attempt (and process, when ``shared``: several processes ran under that
    attempt number at once, e.g. concurrent resumers), its key and outcome; a row: the attempt
    after which it was first seen (``?``: a deployment, whose processes run at once)."""
    if is_row(call):
        return f"a row by attempt {call.attempt}" if call.attempt else "a row"
    key = call.key if call.key is not None else "(no key)"
    who = f"attempt {call.attempt} process {call.pid}" if shared else f"attempt {call.attempt}"
    text = f"{who} key {key} {call.outcome}"
    if call.seq in unknown:
        text += " (response lost)"
    return text


def _shared_attempts(calls: Sequence[Call]) -> list[int]:
    """The attempt numbers under which more than one process made these calls."""
    pids: dict[int, set[int]] = {}
    for c in calls:
        pids.setdefault(c.attempt, set()).add(c.pid)
    return sorted(a for a, p in pids.items() if len(p) > 1)


def calls_phrase(calls: Sequence[Call], unknown: Mapping[int, str], limit: int = 4) -> str:
    shared = _shared_attempts(calls)
    parts = [call_phrase(c, unknown, c.attempt in shared) for c in calls[:limit]]
    if len(calls) > limit:
        parts.append(f"+{len(calls) - limit} more")
    text = ", ".join(parts)
    for attempt in shared:
        n = len({c.pid for c in calls if c.attempt == attempt})
        text += f" ({n} processes ran at once as attempt {attempt}: not one process repeating a call)"
    return text


def distinct_keys(calls: Iterable[Call]) -> list[str]:
    return list(dict.fromkeys(c.key for c in calls if c.key is not None))


def key_changes(calls: Sequence[Call]) -> list[dict[str, Any]]:
    """Where, in ledger order, a call's key differs from the previous call's."""
    out: list[dict[str, Any]] = []
    for prev, cur in pairwise(calls):
        if cur.key != prev.key:
            out.append({"seq": cur.seq, "attempt": cur.attempt, "from": prev.key, "to": cur.key})
    return out


def key_change_scope(calls: Sequence[Call]) -> str:
    """Where keys changed: ``within attempt N`` when every change is between two calls of one
    attempt (the client's own retry, e.g. after a dropped response), else ``between attempts``
    (with ``and within attempt N`` when both happened)."""
    keyed = list(calls)
    within = sorted(
        {cur.attempt for prev, cur in pairwise(keyed) if cur.key != prev.key and cur.attempt == prev.attempt}
    )
    between = any(cur.key != prev.key and cur.attempt != prev.attempt for prev, cur in pairwise(keyed))
    inside = f"within attempt{'s' if len(within) > 1 else ''} {', '.join(map(str, within))}"
    if within and not between:
        return inside
    return f"between attempts and {inside}" if within else "between attempts"


def why_duplicated(landed: Sequence[Call]) -> str:
    if landed and is_row(landed[0]):
        if len({c.attempt for c in landed}) == 1 and landed[0].attempt:
            return "the same attempt wrote the row again (a retry) instead of finding the first"
        return "a later attempt wrote the row again instead of finding the first"
    keys = [c.key for c in landed]
    if all(k is None for k in keys):
        return "sent without an idempotency key"
    if any(k is None for k in keys):
        return "a call was sent without the idempotency key"
    if len(set(keys)) > 1:
        return f"the key changed {key_change_scope(landed)}"
    return f"under the same key {keys[0]}: the provider did not dedupe it"


def runtime_attempts(calls: Sequence[Call]) -> tuple[str, list[dict[str, Any]]]:
    """What the durable runtime called the code that made ``calls``, from the context an
    integration recorded with each (:func:`killdrill.agent.in_runtime`): ``RUNTIME activity
    charge_customer attempts 1 and 2`` and, per call that has one, its seq, the drill's attempt
    and the context (the runtime's own ``attempt`` in it, ``redelivered`` when a broker delivered
    that try again); ``""`` and ``[]`` when none has.
    Framework-agnostic: the words are the context's ``runtime``, ``unit`` and ``name``."""
    detail: list[dict[str, Any]] = []
    groups: dict[str, list[str]] = {}
    for c in calls:
        if not c.context:
            continue
        detail.append({"seq": c.seq, "attempt": c.attempt, "context": c.context})
        ctx = c.context
        head = " ".join(str(ctx[k]) for k in ("runtime", "unit", "name") if ctx.get(k) not in (None, ""))
        numbers = groups.setdefault(head or "runtime", [])
        if ctx.get("attempt") is not None:  # a broker's redelivery of the same try says so
            numbers.append(f"{ctx['attempt']}{' (redelivered)' if ctx.get('redelivered') else ''}")
    parts = []
    for head, numbers in groups.items():
        if not numbers:
            parts.append(head)
        elif len(numbers) == 1:
            parts.append(f"{head} attempt {numbers[0]}")
        else:
            parts.append(f"{head} attempts {', '.join(numbers[:-1])} and {numbers[-1]}")
    return "; ".join(parts), detail


def calls_detail(calls: Sequence[Call], unknown: Mapping[int, str]) -> list[dict[str, Any]]:
    return [
        {
            "seq": c.seq,
            "attempt": c.attempt,
            "key": c.key,
            "outcome": c.outcome,
            "replayed": c.replayed,
            "effect_id": c.effect_id,
            "response_lost": unknown.get(c.seq),  # the point that cut the response, or None
            **({"context": c.context} if c.context else {}),
        }
        for c in calls
    ]


def nearest_baseline(
    key: tuple[str, str, str],
    ident: Mapping[str, Any],
    baseline: Mapping[tuple[str, str, str], list[Call]],
    idents: Mapping[tuple[str, str, str], dict[str, Any]],
) -> str:
    """For an unexpected effect: the baseline effect of the same op it most resembles, and how."""
    best: tuple[int, dict[str, Any]] | None = None
    for other, calls in baseline.items():
        if other[:2] != key[:2] or not any(c.landed for c in calls):
            continue
        theirs = idents[other]
        diff = sorted(differing(ident, theirs))
        if best is None or len(diff) < best[0]:
            best = (len(diff), {"identity": theirs, "differs": diff})
    if best is None:
        return ""
    return (
        f"; the baseline has {format_identity(best[1]['identity'])} instead"
        f" (differs in {', '.join(best[1]['differs'])})"
    )
