"""Consequences: a missing or unexpected effect (or a diverged kv value) whose only difference
from the baseline is a value another violated effect produced (the charge id in a webhook body)
is moved under that violation's ``consequences``: one bug, one root.  The summary then counts
root causes (:func:`regroup_summary`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from killdrill.records import (
    DUPLICATE_EFFECT,
    KEY_CHANGED,
    KEY_REUSED,
    MISSING_EFFECT,
    STATE_DIVERGED,
    UNEXPECTED_EFFECT,
    Call,
    LedgerSnapshot,
    Violation,
)
from killdrill.verdict.causes import FIXES, CauseName
from killdrill.verdict.matching import canonical

__all__ = ["regroup_summary", "roots_and_consequences"]


_ROOT_KINDS = (DUPLICATE_EFFECT, KEY_CHANGED, KEY_REUSED, UNEXPECTED_EFFECT)


def _sub(text: str, ids: Iterable[str]) -> str:
    for i in sorted(set(ids), key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(i)}(?![A-Za-z0-9_])", "\x00ID\x00", text)
    return text


def _root_ids(root: Violation, baseline: LedgerSnapshot) -> tuple[set[str], set[str]]:
    """Effect ids the root's calls produced in the case, and its baseline counterpart's."""
    mine = {c.effect_id for c in root.calls if c.effect_id and c.landed}
    ident = canonical(root.identity or {})
    theirs = {
        c.effect_id
        for c in baseline.calls
        if c.effect_id
        and c.landed
        and c.provider == root.provider
        and c.op == root.op
        and _same_identity(c, root.identity or {}, ident)
    }
    return mine, theirs


def _same_identity(call: Call, identity: Mapping[str, Any], text: str) -> bool:
    return canonical({k: call.payload.get(k) for k in identity}) == text


def _only_ids_differ(got: Any, want: Any, mine: set[str], theirs: set[str]) -> bool:
    a, b = canonical(got), canonical(want)
    if a == b:
        return False
    return _sub(a, mine) == _sub(b, theirs) and (_sub(a, mine) != a)


def roots_and_consequences(violations: Sequence[Violation], baseline: LedgerSnapshot) -> list[Violation]:
    """Move missing/unexpected effects and diverged kv values that differ from the baseline only by
    an effect id a root violation produced under that root's ``consequences``."""
    roots = [v for v in violations if v.kind in _ROOT_KINDS and v.calls]
    if not roots:
        return list(violations)
    ids = {id(r): _root_ids(r, baseline) for r in roots}
    unexpected = [v for v in violations if v.kind == UNEXPECTED_EFFECT]
    missing = [v for v in violations if v.kind == MISSING_EFFECT]
    owner: dict[int, Violation] = {}  # id(consequence) -> root

    def explains(root: Violation, got: Any, want: Any) -> bool:
        mine, theirs = ids[id(root)]
        return bool(mine) and _only_ids_differ(got, want, mine, theirs)

    for u in unexpected:
        for root in roots:
            if root is u or id(u) in owner:
                continue
            partners = [m for m in missing if (m.provider, m.op) == (u.provider, u.op)]
            base = [
                {k: c.payload.get(k) for k in (u.identity or {})}
                for c in baseline.calls
                if c.landed and (c.provider, c.op) == (u.provider, u.op)
            ]
            for m in partners:
                if explains(root, u.identity, m.identity):
                    owner[id(u)] = root
                    owner[id(m)] = root
                    break
            else:
                if any(explains(root, u.identity, b) for b in base):
                    owner[id(u)] = root
    for s in (v for v in violations if v.kind == STATE_DIVERGED):
        for root in roots:
            if (
                s.detail.get("present")
                and s.detail.get("in_baseline")
                and explains(root, s.detail.get("value"), s.detail.get("baseline"))
            ):
                owner[id(s)] = root
                break
    if not owner:
        return list(violations)
    # a root that is itself a consequence hangs under its own root
    out: list[Violation] = []
    children: dict[int, list[Violation]] = {}
    for v in violations:
        if id(v) in owner:
            children.setdefault(id(owner[id(v)]), []).append(v)
    for v in violations:
        if id(v) in owner:
            continue
        kids = children.get(id(v), [])
        if kids:
            name = f"{v.provider}.{v.op}"
            kids = [
                replace(
                    k,
                    cause=str(CauseName.CONSEQUENCE),
                    observed=f"it differs from the baseline only by the id {name} produced "
                    f"({', '.join(sorted(ids[id(v)][0]))} instead of "
                    f"{', '.join(sorted(ids[id(v)][1])) or '-'})",
                    fix=FIXES[CauseName.CONSEQUENCE],
                )
                for k in kids
            ]
            v = replace(v, consequences=(*v.consequences, *kids))
        out.append(v)
    return out


def regroup_summary(
    summary: Mapping[str, Mapping[str, int]], violations: Sequence[Violation]
) -> dict[str, dict[str, int]]:
    """Per provider counts where the effects listed as consequences count as ``consequence``,
    not as lost or unexpected: the summary counts root causes."""
    out = {p: dict(c) for p, c in summary.items()}
    for v in violations:
        for k in v.consequences:
            counts = out.get(k.provider or "")
            if counts is None:
                continue
            if k.kind == STATE_DIVERGED:  # a kv value that changed: its set counted as lost + unexpected
                if counts.get("lost", 0) > 0 and counts.get("unexpected", 0) > 0:
                    counts["lost"] -= 1
                    counts["unexpected"] -= 1
                    counts["consequence"] = counts.get("consequence", 0) + 1
                continue
            field = {str(MISSING_EFFECT): "lost", str(UNEXPECTED_EFFECT): "unexpected"}.get(str(k.kind))
            if field is None or counts.get(field, 0) <= 0:
                continue
            counts[field] -= 1
            # one changed effect: its lost + unexpected pair counts once
            paired = any(o.kind == UNEXPECTED_EFFECT and o.provider == k.provider for o in v.consequences)
            if k.kind == UNEXPECTED_EFFECT or not paired:
                counts["consequence"] = counts.get("consequence", 0) + 1
    return out
