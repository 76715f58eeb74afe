"""The min-cost matching of :mod:`killdrill.verdict.matching`, near-linear where runs agree.

The verdict only needs the *fields* that differ within matched pairs (:func:`volatile_fields`),
and two clean runs of a batch agent mostly make the same calls.  So, in this order:

1. **Identical payloads pair by hashing** (each canonical form computed once): under equal keys
   always; under different keys when no key is on both sides of what is left (then every pair
   costs one key and keys decide nothing).  This never changes the answer: if ``a`` and ``b``
   are at distance 0, an optimal matching that pairs ``a-y`` and ``x-b`` can swap to ``a-b``,
   ``x-y`` at no greater cost (the cost is a metric), and at equal cost
   ``D(x,y) = D(x,a) | D(a,y)``: the union of differing fields is the same.
2. **One field apart, by hashing**: for each field ``f``, calls whose payloads agree on every
   other field form a biclique at distance 1.  If pairing within those bicliques pairs every
   call of the shorter side, that matching is optimal (after step 1 no pair is at distance 0,
   so every call is paired at its minimum): the row-minimum lower bound certifies it.  When
   keys matter (a key on both sides, e.g. a batch's stable keys under a volatile run id), only
   if no identical payloads are left and each call is paired under its own key whenever a call
   one field apart has it (``_keys_certified``): its row minimum then includes the key.
3. Otherwise the **exact assignment** on what step 1 left: ``scipy.optimize.linear_sum_assignment``
   on a cost matrix built with numpy (field values as integer codes) when scipy is installed,
   else the pure-Python Hungarian algorithm with costs from the cached per-field forms.
4. A residual too large for an exact assignment (:data:`EXACT_CELLS`) keeps step 2's pairs and
   pairs the rest in ledger order: an *approximation*, logged and counted in :data:`STATS`.

Cost as before: differing fields times a weight that keys never outweigh, plus one when the
keys differ.  Among equally cheap matchings the choice may differ from the old all-pairs
Hungarian's scan order; the union of differing fields is the same whenever it does not depend
on that choice (``tests/unit/verdict/test_matching_scale.py`` checks it against the old algorithm).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

from killdrill.alloc import gc_paused
from killdrill.records import Call
from killdrill.verdict.matching import assignment, canonical

__all__ = ["EXACT_CELLS", "PURE_CELLS", "STATS", "match_calls"]

log = logging.getLogger("killdrill.verdict.matching")

EXACT_CELLS = 16_000_000
"""Largest residual (left x right calls) solved exactly with scipy (int64 matrix: 128 MB)."""
PURE_CELLS = 1_000_000
"""Largest residual solved exactly without scipy (the pure-Python Hungarian)."""

STATS: dict[str, int] = {"exact_pairs": 0, "certified_pairs": 0, "assigned": 0, "approximated": 0}
"""Counters since start (how each pair was found): a benchmark or test reads them."""

_MISSING = "\0missing"


def _canon(value: object) -> str:
    """:func:`~killdrill.verdict.matching.canonical`, without ``json.dumps`` for the common scalars."""
    kind = type(value)
    if kind is str:
        text: str = value  # type: ignore[assignment]
        if '"' not in text and "\\" not in text and text.isprintable():
            return f'"{text}"'
    elif kind is int:
        return str(value)
    return canonical(value)


def _fields(call: Call) -> dict[str, str]:
    """Each payload field's canonical form, computed once per call."""
    return {k: _canon(v) for k, v in call.payload.items()}


def _same_key(
    lefts: list[int], rights: list[int], lkeys: Sequence[str | None], rkeys: Sequence[str | None]
) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Pairs of one class (interchangeable by content) under equal keys, in ledger order; and
    what is left of each side."""
    if len(lefts) == 1 and len(rights) == 1:
        if lkeys[lefts[0]] == rkeys[rights[0]]:
            return [(lefts[0], rights[0])], [], []
        return [], lefts, rights
    by_key: dict[str | None, deque[int]] = {}
    for j in rights:
        by_key.setdefault(rkeys[j], deque()).append(j)
    pairs: list[tuple[int, int]] = []
    rest_l: list[int] = []
    for i in lefts:
        same = by_key.get(lkeys[i])
        if same:
            pairs.append((i, same.popleft()))
        else:
            rest_l.append(i)
    used_r = {j for _, j in pairs}
    return pairs, rest_l, [j for j in rights if j not in used_r]


def _pair_within(
    lefts: list[int], rights: list[int], lkeys: Sequence[str | None], rkeys: Sequence[str | None]
) -> list[tuple[int, int]]:
    """Pairs of one class: equal keys first, then ledger order."""
    pairs, rest_l, rest_r = _same_key(lefts, rights, lkeys, rkeys)
    return pairs + list(zip(rest_l, rest_r, strict=False))


def _exact(
    lf: list[dict[str, str]],
    rf: list[dict[str, str]],
    lkeys: list[str | None],
    rkeys: list[str | None],
) -> list[tuple[int, int]] | None:
    """Min-cost pairs of the residual, or None when it is too large to solve exactly."""
    n, m = len(lf), len(rf)
    weight = n + m + 1
    try:
        import numpy as np
        from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        if n * m > PURE_CELLS:
            return None
        cost = [
            [
                weight * sum(1 for f in a.keys() | b.keys() if a.get(f, _MISSING) != b.get(f, _MISSING))
                + (ka != kb)
                for b, kb in zip(rf, rkeys, strict=True)
            ]
            for a, ka in zip(lf, lkeys, strict=True)
        ]
        return assignment(cost)
    if n * m > EXACT_CELLS:
        return None
    fields = sorted({f for d in (*lf, *rf) for f in d})
    matrix = np.zeros((n, m), dtype=np.int64)
    for f in fields:
        codes: dict[str, int] = {}
        left = np.fromiter((codes.setdefault(d.get(f, _MISSING), len(codes)) for d in lf), np.int64, n)
        right = np.fromiter((codes.setdefault(d.get(f, _MISSING), len(codes)) for d in rf), np.int64, m)
        matrix += left[:, None] != right[None, :]
    matrix *= weight
    kcodes: dict[str | None, int] = {}
    left = np.fromiter((kcodes.setdefault(k, len(kcodes)) for k in lkeys), np.int64, n)
    right = np.fromiter((kcodes.setdefault(k, len(kcodes)) for k in rkeys), np.int64, m)
    matrix += left[:, None] != right[None, :]
    rows, cols = linear_sum_assignment(matrix)
    return [(int(i), int(j)) for i, j in zip(rows, cols, strict=True)]


def _one_apart(
    lf: list[dict[str, str]],
    rf: list[dict[str, str]],
    lkeys: list[str | None],
    rkeys: list[str | None],
) -> list[tuple[int, int]]:
    """Greedy pairs within the distance-1 bicliques (payloads equal but for one field)."""
    # the fields most values of which are on one side only first: the volatile one is usually
    # the first tried, and pairing stops when one side is used up
    seen: dict[str, tuple[set[str], set[str]]] = {}
    for side, forms in ((0, lf), (1, rf)):
        for d in forms:
            for k, v in d.items():
                seen.setdefault(k, (set(), set()))[side].add(v)
    fields = sorted(seen, key=lambda f: (-len(seen[f][0] ^ seen[f][1]), f))
    free_l = set(range(len(lf)))
    free_r = set(range(len(rf)))
    pairs: list[tuple[int, int]] = []
    for f in fields:
        groups: dict[tuple[tuple[str, str], ...], tuple[list[int], list[int]]] = {}
        for side, forms, free in ((0, lf, free_l), (1, rf, free_r)):
            for i in sorted(free):
                rest = tuple(sorted((k, v) for k, v in forms[i].items() if k != f))
                groups.setdefault(rest, ([], []))[side].append(i)
        for ls, rs in groups.values():
            if ls and rs:
                for i, j in _pair_within(ls, rs, lkeys, rkeys):
                    pairs.append((i, j))
                    free_l.discard(i)
                    free_r.discard(j)
        if not free_l or not free_r:
            break
    return pairs


def _keys_certified(
    near: list[tuple[int, int]],
    lf: list[dict[str, str]],
    rf: list[dict[str, str]],
    lkeys: list[str | None],
    rkeys: list[str | None],
) -> bool:
    """When keys matter, one-apart pairs are optimal if each call of the shorter side is paired
    at its row minimum: under its own key whenever a call one field apart has that key."""
    if len(lf) > len(rf):  # the shorter side's view
        return _keys_certified([(j, i) for i, j in near], rf, lf, rkeys, lkeys)
    by_key: dict[str | None, list[int]] = {}
    for j, k in enumerate(rkeys):
        by_key.setdefault(k, []).append(j)
    for i, j in near:
        if lkeys[i] == rkeys[j]:
            continue
        a = lf[i]
        for j2 in by_key.get(lkeys[i], ()):
            b = rf[j2]
            if sum(1 for f in a.keys() | b.keys() if a.get(f, _MISSING) != b.get(f, _MISSING)) <= 1:
                return False
    return True


def match_calls(left: Sequence[Call], right: Sequence[Call]) -> list[tuple[Call, Call]]:
    """Pairs of calls (one from each side, each used at most once) that are most alike overall:
    identical ones by hashing first, the rest assigned.

    The collector is paused meanwhile: the work allocates a few containers per call and makes no
    cycles, and at 10^5 calls the collector's passes were half the time."""
    with gc_paused():
        return _match(left, right)


def _match(left: Sequence[Call], right: Sequence[Call]) -> list[tuple[Call, Call]]:
    left = sorted(left, key=lambda c: c.seq)
    right = sorted(right, key=lambda c: c.seq)
    if not left or not right:
        return []
    lkeys = [c.key for c in left]
    rkeys = [c.key for c in right]
    # 1. identical payloads: one canonical form per call, one dict lookup; (a) under equal keys
    classes: dict[str, tuple[list[int], list[int]]] = {}
    for side, calls in ((0, left), (1, right)):
        for i, c in enumerate(calls):
            classes.setdefault(canonical(c.payload), ([], []))[side].append(i)
    pairs: list[tuple[int, int]] = []
    rest: list[tuple[list[int], list[int]]] = []
    for ls, rs in classes.values():
        if ls and rs:
            same, rest_l, rest_r = _same_key(ls, rs, lkeys, rkeys)
            pairs.extend(same)
            if rest_l and rest_r:
                rest.append((rest_l, rest_r))
    used_l = {i for i, _ in pairs}
    used_r = {j for _, j in pairs}
    # (b) under different keys, but only when no key is on both sides of what is left: then every
    # pair costs one key and keys decide nothing (else the assignment weighs them)
    keys_matter = bool(
        {lkeys[i] for i in range(len(left)) if i not in used_l}
        & {rkeys[j] for j in range(len(right)) if j not in used_r}
    )
    if not keys_matter:
        for rest_l, rest_r in rest:
            for i, j in zip(rest_l, rest_r, strict=False):
                pairs.append((i, j))
                used_l.add(i)
                used_r.add(j)
    STATS["exact_pairs"] += len(pairs)
    rl = [i for i in range(len(left)) if i not in used_l]
    rr = [j for j in range(len(right)) if j not in used_r]
    if rl and rr:
        sub_lf, sub_rf = [_fields(left[i]) for i in rl], [_fields(right[j]) for j in rr]
        sub_lk, sub_rk = [lkeys[i] for i in rl], [rkeys[j] for j in rr]
        # 2. one field apart, certified when it pairs every call of the shorter side
        # with keys that matter, only when no identical payloads are left (else distance 0 is)
        near = [] if keys_matter and rest else _one_apart(sub_lf, sub_rf, sub_lk, sub_rk)
        if (
            near
            and len(near) == min(len(rl), len(rr))
            and (not keys_matter or _keys_certified(near, sub_lf, sub_rf, sub_lk, sub_rk))
        ):
            STATS["certified_pairs"] += len(near)
            sub = near
        else:
            # 3. the exact assignment
            exact = _exact(sub_lf, sub_rf, sub_lk, sub_rk)
            if exact is not None:
                STATS["assigned"] += len(exact)
                sub = exact
            else:  # 4. too large: the certified-looking pairs, then ledger order (approximation)
                sub = list(near)
                near_l, near_r = {a for a, _ in near}, {b for _, b in near}
                free_l = [i for i in range(len(rl)) if i not in near_l]
                free_r = [j for j in range(len(rr)) if j not in near_r]
                sub += list(zip(free_l, free_r, strict=False))
                STATS["approximated"] += len(sub) - len(near)
                log.warning(
                    "matching %d x %d calls of %s.%s approximated: %d pairs in ledger order",
                    len(rl),
                    len(rr),
                    left[0].provider,
                    left[0].op,
                    len(sub) - len(near),
                )
        pairs.extend((rl[i], rr[j]) for i, j in sub)
    return [(left[i], right[j]) for i, j in sorted(pairs)]
