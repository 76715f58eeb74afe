"""Each call's logical effect computed once per snapshot, and the lookups the checks need.

A case is judged (:func:`~killdrill.verdict.judge`), then summarized
(:func:`~killdrill.verdict.summarize`), each grouping both ledgers by effect: at 10^5 calls the
grouping (one identity dict and one canonical JSON text per call) was most of the verdict, done
four times.  :func:`grouping` does it once per ``(calls, identity, volatile)`` and keeps the last
few in a small cache keyed by the calls tuple's identity (a snapshot's calls are an immutable
tuple; the cache holds a reference, so the id cannot be reused while cached).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from killdrill.canonical import canonical_json as canonical
from killdrill.providers import spec
from killdrill.records import Call

__all__ = ["NAMED_BY_PAYLOAD", "EffectNaming", "Grouping", "ProviderFlags", "grouping"]

EffectKey = tuple[str, str, str]

CACHED = 8
"""Groupings kept: a case's judge and summary, its own-thread rejudge, a discovery's two runs."""


class ProviderFlags:
    """:func:`killdrill.providers.spec`'s flags the verdict asks per call, looked up once per
    provider for one computation (a provider may be declared later, so never cached for long)."""

    def __init__(self) -> None:
        self._call_only: dict[str, bool] = {}
        self._convergent: dict[str, bool] = {}

    def call_only(self, provider: str) -> bool:
        found = self._call_only.get(provider)
        if found is None:
            found = self._call_only[provider] = spec(provider).call_only
        return found

    def convergent(self, provider: str) -> bool:
        found = self._convergent.get(provider)
        if found is None:
            found = self._convergent[provider] = spec(provider).convergent
        return found


@dataclass
class Grouping:
    """Effect calls grouped by logical effect, groups in order of first call, calls in ledger
    order; and each group's identity (of its first call).  Shared: read it, never mutate it."""

    groups: dict[EffectKey, list[Call]] = field(default_factory=dict)
    identities: dict[EffectKey, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class EffectNaming:
    """How a call is named as a logical effect: per ``provider.op``, the identity fields the user
    configured (``--identity``), else its payload without the fields two clean runs showed to be
    volatile (``Discovery.volatile``)."""

    identity: Mapping[str, Sequence[str]] = field(default_factory=dict)
    volatile: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def rule(self, provider: str, op: str) -> tuple[tuple[str, ...] | None, frozenset[str]]:
        """The configured identity fields of ``provider.op`` (or None), and the volatile ones to leave out."""
        full = f"{provider}.{op}"
        if full in self.identity:
            return tuple(self.identity[full]), frozenset()
        return None, frozenset(self.volatile.get(full, ()))

    def identity_of(self, provider: str, op: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The fields that name the effect of a call of ``provider.op`` with ``payload``."""
        only, skip = self.rule(provider, op)
        if only is not None:
            return {f: payload[f] for f in only if f in payload}
        return {k: v for k, v in payload.items() if k not in skip}

    @functools.cached_property
    def signature(self) -> str:
        """One text per configuration (the grouping cache's key)."""
        return canonical([{k: list(v) for k, v in m.items()} for m in (self.identity, self.volatile)])


NAMED_BY_PAYLOAD = EffectNaming()
"""No identity fields configured, no volatile field known: a call's whole payload names it."""

_cache: OrderedDict[tuple[int, str], tuple[Sequence[Call], Grouping]] = OrderedDict()
_lock = threading.Lock()


def grouping(calls: Iterable[Call], naming: EffectNaming = NAMED_BY_PAYLOAD) -> Grouping:
    """The calls grouped by logical effect (what :func:`killdrill.verdict.group_effects` returns),
    computed once per tuple of calls and naming."""
    if not isinstance(calls, tuple):
        return _group(list(calls), naming)
    key = (id(calls), naming.signature)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] is calls:
            _cache.move_to_end(key)
            return hit[1]
    out = _group(calls, naming)
    with _lock:
        _cache[key] = (calls, out)
        while len(_cache) > CACHED:
            _cache.popitem(last=False)
    return out


def _group(calls: Sequence[Call], naming: EffectNaming) -> Grouping:
    flags = ProviderFlags()
    call_only = {p: flags.call_only(p) for p in {c.provider for c in calls}}
    ordered = [c for c in calls if not call_only[c.provider]]
    if any(a.seq > b.seq for a, b in pairwise(ordered)):
        ordered.sort(key=lambda c: c.seq)
    # per op, once: the configured identity fields, or the volatile fields to leave out
    rules: dict[tuple[str, str], tuple[tuple[str, ...] | None, frozenset[str]]] = {}
    out = Grouping()
    groups, identities = out.groups, out.identities
    for call in ordered:  # the verdict's hottest loop at 10^5 calls: locals, one lookup each
        provider, name, payload = call.provider, call.op, call.payload
        rule = rules.get((provider, name))
        if rule is None:
            rule = rules[(provider, name)] = naming.rule(provider, name)
        only, skip = rule
        if only is not None:
            ident = {f: payload[f] for f in only if f in payload}
        elif skip and not skip.isdisjoint(payload):
            ident = {k: v for k, v in payload.items() if k not in skip}
        else:
            ident = payload
        key = (provider, name, canonical(ident))
        group = groups.get(key)
        if group is None:
            groups[key] = [call]
            identities[key] = ident if ident is not payload else dict(ident)
        else:
            group.append(call)
    return out
