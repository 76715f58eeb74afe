"""How much model work a resume re-spent: the deploy-hygiene figure of an agent that calls a model.

The model fake records every answered request as a call of provider ``model`` with its token
counts.  A case's model work beyond what a clean run of the same agent spends was paid again
because a kill threw work away (a reply lost with its process, a step re-run from the last
checkpoint): "how much work is replay".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from killdrill.providers import spec
from killdrill.records import Call, LedgerSnapshot

__all__ = ["MODEL_WORK_FIELDS", "model_work", "render_model_work", "sum_model_work", "unscripted_line"]

MODEL_WORK_FIELDS = (
    "calls",
    "tokens",
    "baseline_calls",
    "baseline_tokens",
    "respent_calls",
    "respent_tokens",
)


def _spent(calls: Iterable[Call]) -> tuple[int, int, dict[int, int]]:
    n = tokens = 0
    by_attempt: dict[int, int] = {}
    for c in calls:
        if not spec(c.provider).call_only or "unscripted" in c.payload:
            continue  # an effect, or a model call no script answered: no work done
        n += 1
        tokens += int(c.payload.get("prompt_tokens") or 0) + int(c.payload.get("completion_tokens") or 0)
        by_attempt[c.attempt] = by_attempt.get(c.attempt, 0) + 1
    return n, tokens, by_attempt


def model_work(baseline: LedgerSnapshot, case: LedgerSnapshot) -> dict[str, Any]:
    """The case's model calls and tokens, a clean run's, and the difference a resume re-spent
    (``{}`` when the agent called no model)."""
    n, tokens, by_attempt = _spent(case.calls)
    bn, btokens, _ = _spent(baseline.calls)
    if not n and not bn:
        return {}
    return {
        "calls": n,
        "tokens": tokens,
        "baseline_calls": bn,
        "baseline_tokens": btokens,
        "respent_calls": max(0, n - bn),
        "respent_tokens": max(0, tokens - btokens),
        "calls_by_attempt": {str(a): k for a, k in sorted(by_attempt.items())},
    }


def sum_model_work(works: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Totals over cases (``{}`` when no case called a model)."""
    out: dict[str, int] = {}
    for w in works:
        if w:
            for f in MODEL_WORK_FIELDS:
                out[f] = out.get(f, 0) + int(w.get(f, 0))
            out["cases"] = out.get("cases", 0) + int(w.get("cases", 1))  # the clean runs summed
    return out


def render_model_work(w: Mapping[str, Any]) -> str:
    """``7 calls, 1230 tokens (a clean run: 4 calls, 700 tokens); re-spent by resumes: 3 calls, ...``;
    a sum over cases (``cases`` > 1) compares with as many clean runs, one per case, and says so."""
    n = int(w.get("cases", 1))
    clean = "a clean run" if n == 1 else f"{n} clean runs, one per case"
    return (
        f"{w['calls']} call{'s' if w['calls'] != 1 else ''}, {w['tokens']} tokens "
        f"({clean}: {w['baseline_calls']} calls, {w['baseline_tokens']} tokens); "
        f"re-spent by resumes: {w['respent_calls']} calls, {w['respent_tokens']} tokens"
    )


def unscripted_line(ledger: LedgerSnapshot | None) -> str | None:
    """One line when the agent called the model fake and the drill has no script to answer it
    (the fake answered 400 and recorded what was asked), else None."""
    calls = ledger.calls if ledger is not None else ()
    asked = [str(c.payload["unscripted"]) for c in calls if "unscripted" in c.payload]
    if not asked:
        return None
    more = f" (and {len(asked) - 1} more)" if len(asked) > 1 else ""
    return (
        f"the agent called a model and the drill has no --model-script: {asked[0]}{more}; the model "
        "fake answered 400 (no real model is ever called from a drill): pass --model-script FILE"
    )
