"""Which calls of two runs are the same effect: a min-cost matching by content, never by order.

Parallel branches (a fan-out, two nodes in one superstep) land in any order, so the
n-th call of an op in one run is not the n-th in the other.  Each call is paired with its most
similar counterpart instead: a minimum-cost assignment (Hungarian algorithm) where the cost of a
pair is how many payload fields differ, a different idempotency key breaking ties, and the
ledger order breaking what is left, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from killdrill.canonical import canonical_json as canonical
from killdrill.records import Call

__all__ = ["assignment", "canonical", "differing", "payload_distance"]


def differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    """Fields present in only one mapping, or with canonically different values."""
    return {f for f in set(a) | set(b) if f not in a or f not in b or canonical(a[f]) != canonical(b[f])}


def assignment(cost: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Minimum-cost pairs ``(row, column)`` of a rectangular cost matrix (each used at most once;
    ``min(rows, columns)`` pairs).  Hungarian algorithm with potentials, O(n^3); among equal-cost
    optima the scan order (lower indices first) decides, so it is deterministic."""
    rows = len(cost)
    cols = len(cost[0]) if rows else 0
    if rows == 0 or cols == 0:
        return []
    transpose = rows > cols
    if transpose:  # the algorithm wants rows <= columns
        cost = [list(col) for col in zip(*cost, strict=True)]
        rows, cols = cols, rows
    inf = float("inf")
    u = [0.0] * (rows + 1)
    v = [0.0] * (cols + 1)
    match = [0] * (cols + 1)  # column -> row (1-based), 0 = free
    way = [0] * (cols + 1)
    for i in range(1, rows + 1):
        match[0] = i
        j0 = 0
        minv = [inf] * (cols + 1)
        used = [False] * (cols + 1)
        while True:
            used[j0] = True
            i0, delta, j1 = match[j0], inf, 0
            for j in range(1, cols + 1):
                if not used[j]:
                    cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(cols + 1):
                if used[j]:
                    u[match[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if match[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    pairs = [(match[j] - 1, j - 1) for j in range(1, cols + 1) if match[j]]
    if transpose:
        pairs = [(c, r) for r, c in pairs]
    return sorted(pairs)


def payload_distance(a: Call, b: Call, *, weight: int) -> int:
    """Differing payload fields (times ``weight``), plus one when the keys differ: content first,
    the key only to break ties."""
    return len(differing(a.payload, b.payload)) * weight + (a.key != b.key)
