"""Where two values differ, said briefly: a long value cut at its start would hide the difference."""

from __future__ import annotations

from typing import Any

from killdrill.verdict.matching import canonical


def _differing_leaves(want: Any, got: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The leaves where two values differ, as dotted paths (dicts are walked, other values compared)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in dict.fromkeys([*want, *got]):
            sub = f"{path}.{key}" if path else str(key)
            if key not in got or key not in want:
                out.append((sub, want.get(key, "(absent)"), got.get(key, "(absent)")))
            elif canonical(want[key]) != canonical(got[key]):
                out.extend(_differing_leaves(want[key], got[key], sub))
        return out
    return [(path, want, got)]


def _around_diff(value: Any, other: Any, limit: int = 40) -> str:
    """``value`` shortened around where it first differs from ``other`` (not just its start)."""
    text = value if isinstance(value, str) else canonical(value)
    if len(text) <= limit:
        return text
    peer = other if isinstance(other, str) else canonical(other)
    first = next(
        (i for i, (a, b) in enumerate(zip(text, peer, strict=False)) if a != b), min(len(text), len(peer))
    )
    start = max(0, min(first - 10, len(text) - limit + 2))
    cut = text[start : start + limit - 2]
    return ("…" if start else "") + cut + ("…" if start + len(cut) < len(text) else "")


def value_diff(want: Any, got: Any, shown: int = 4) -> str:
    """``{amount: 8400 (baseline 4200)}``: only the differing fields, so a long value never hides them."""
    diffs = _differing_leaves(want, got)
    if len(diffs) == 1 and not diffs[0][0]:
        return f"{_around_diff(got, want)} (baseline {_around_diff(want, got)})"
    parts = [f"{p}: {_around_diff(g, w)} (baseline {_around_diff(w, g)})" for p, w, g in diffs[:shown]]
    more = f", and {len(diffs) - shown} more field(s)" if len(diffs) > shown else ""
    return "{" + ", ".join(parts) + more + "}, other fields as the baseline"
