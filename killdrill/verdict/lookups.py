"""Indexes the core checks build once per judged case, so each check is linear in the calls.

Without them ``unexpected_effect`` would rebuild two dicts of every effect per unexpected effect
and compare it with every baseline effect of its op (O(U·B)), and ``state_diverged`` and
``stuck_in_flight`` would scan every call per key.  Each index here is built lazily, on the first
check that needs it, and kept in :attr:`CheckContext.memo` for the rest of the case.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from killdrill.records import Call
from killdrill.verdict.checks import CheckContext, Effect
from killdrill.verdict.index import ProviderFlags
from killdrill.verdict.matching import canonical, differing
from killdrill.verdict.phrases import format_identity

__all__ = ["NEAREST_BUDGET", "SCAN_BELOW", "held_calls", "kv_writes", "nearest_baseline_phrase"]

SCAN_BELOW = 64
"""Baseline effects of one op below which the nearest one is found by a plain scan."""
NEAREST_BUDGET = 2_000_000
"""Identity comparisons one case may spend on scans for nearest baseline effects; beyond it
only a baseline effect one field apart (found by hashing) is named."""

Forms = dict[str, str]
Sig = tuple[tuple[str, str], ...]


def _forms(ident: Mapping[str, Any]) -> Forms:
    return {k: canonical(v) for k, v in ident.items()}


def _sig(forms: Forms, without: str | None = None) -> Sig:
    return tuple(sorted((k, v) for k, v in forms.items() if k != without))


class _Candidates:
    """The landed baseline effects of one op, in the order the checks see effects."""

    def __init__(self) -> None:
        self.idents: list[dict[str, Any]] = []
        self._forms: list[Forms] | None = None
        self._index: dict[tuple[str, str, Sig], list[int]] | None = None

    def forms(self) -> list[Forms]:
        if self._forms is None:
            self._forms = [_forms(i) for i in self.idents]
        return self._forms

    def one_apart(self, ident: Mapping[str, Any]) -> int | None:
        """The first candidate exactly one identity field away from ``ident`` (by hashing)."""
        if self._index is None:
            index: dict[tuple[str, str, Sig], list[int]] = {}
            for n, forms in enumerate(self.forms()):
                index.setdefault(("whole", "", _sig(forms)), []).append(n)
                for f in forms:
                    index.setdefault(("minus", f, _sig(forms, f)), []).append(n)
                    index.setdefault(("minus-any", "", _sig(forms, f)), []).append(n)
            self._index = index
        mine = _forms(ident)
        found: list[int] = []
        for f in mine:
            rest = _sig(mine, f)
            found += [n for n in self._index.get(("minus", f, rest), ()) if self.forms()[n][f] != mine[f]]
            found += self._index.get(("whole", "", rest), ())
        found += self._index.get(("minus-any", "", _sig(mine)), ())
        return min(found) if found else None


def _candidates(ctx: CheckContext) -> dict[tuple[str, str], _Candidates]:
    found = ctx.memo.get("baseline_by_op")
    if found is None:
        found = {}
        for e in ctx.effects:
            if e.baseline and any(c.landed for c in e.baseline):
                found.setdefault(e.key[:2], _Candidates()).idents.append(e.identity)
        ctx.memo["baseline_by_op"] = found
    return found


def nearest_baseline_phrase(ctx: CheckContext, effect: Effect) -> str:
    """:func:`killdrill.verdict.phrases.nearest_baseline` for ``effect``: the baseline effect of the
    same op it most resembles (the first of the closest), and how.  A plain scan for a few
    candidates; for many, one field apart by hashing first, then a scan within the budget."""
    cands = _candidates(ctx).get(effect.key[:2])
    if cands is None:
        return ""
    ident = effect.identity
    best: tuple[int, int] | None = None  # (distance, candidate)
    if len(cands.idents) >= SCAN_BELOW:
        n = cands.one_apart(ident)
        if n is not None:
            best = (1, n)
        else:
            spent = ctx.memo.get("nearest_spent", 0)
            if spent + len(cands.idents) > NEAREST_BUDGET:
                return ""
            ctx.memo["nearest_spent"] = spent + len(cands.idents)
            mine = _forms(ident)
            for n, theirs in enumerate(cands.forms()):
                d = sum(1 for f in mine.keys() | theirs.keys() if mine.get(f) != theirs.get(f))
                if best is None or d < best[0]:
                    best = (d, n)
    else:
        for n, theirs_ident in enumerate(cands.idents):
            d = len(differing(ident, theirs_ident))
            if best is None or d < best[0]:
                best = (d, n)
    if best is None:
        return ""
    theirs = cands.idents[best[1]]
    diff = sorted(differing(ident, theirs))
    return f"; the baseline has {format_identity(theirs)} instead (differs in {', '.join(diff)})"


def kv_writes(ctx: CheckContext, key: str) -> tuple[Call, ...]:
    """The case's calls of convergent providers whose payload ``key`` is ``key``, in ledger order."""
    found = ctx.memo.get("kv_writes")
    if found is None:
        found = {}
        flags = ProviderFlags()
        for c in ctx.case.calls:
            k = c.payload.get("key")
            if isinstance(k, str) and flags.convergent(c.provider):
                found.setdefault(k, []).append(c)
        ctx.memo["kv_writes"] = found
    return tuple(found.get(key, ()))


def held_calls(ctx: CheckContext, provider: str, key: str) -> tuple[Call, ...]:
    """The case's calls of ``provider`` under ``key``, in ledger order."""
    found = ctx.memo.get("held")
    if found is None:
        found = {}
        for c in ctx.case.calls:
            if c.key is not None:
                found.setdefault((c.provider, c.key), []).append(c)
        ctx.memo["held"] = found
    return tuple(found.get((provider, key), ()))
