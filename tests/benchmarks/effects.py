"""The verdict as the agent's effects grow (issue 23): 10^2 .. 10^5 effects, one case each.

    python -m tests.benchmarks.effects [--quick]

What a case costs the harness beyond its attempts, on synthetic ledgers of the payout batch
(``tests/agents/basic/payout_batch.py``): two clean runs (``volatile_fields``: their keys differ,
field ``run`` differs in the ``stamp`` shape) and a case killed in the middle of a batch (the
unfinished batch replayed under its keys), then :func:`killdrill.verdict.judge`, the summary and
the JSON report's ledger.  Per size: seconds per case, microseconds per effect (side by side: flat
means linear) and the peak of the harness's allocations (``tracemalloc``) in MB.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import tracemalloc
from typing import Any

from killdrill.records import Attempt, Call, LedgerSnapshot
from killdrill.verdict import judge, summarize, volatile_fields

SIZES = (100, 1_000, 10_000, 100_000)


def _run(n: int, thread: str, seq0: int, *, stamp: bool, kill_at: int | None = None) -> list[Call]:
    """The payout batch's calls: one charge per payee; a kill replays its batch of 50."""
    calls: list[Call] = []
    seq = seq0

    def charge(i: int, attempt: int, outcome: str) -> None:
        nonlocal seq
        payload: dict[str, Any] = {"account": f"payee-{i:06d}", "amount": 1000 + i % 97}
        if stamp:
            payload["run"] = thread
        calls.append(
            Call(
                seq, "payments", "charge", f"{thread}:payee-{i:06d}", payload, outcome, None, attempt, 1, 0.0
            )
        )
        seq += 1

    if kill_at is None:
        for i in range(n):
            charge(i, 1, "created")
        return calls
    for i in range(kill_at):
        charge(i, 1, "created")
    for i in range(kill_at - kill_at % 50, n):  # attempt 2 replays the unfinished batch
        charge(i, 2, "replayed" if i < kill_at else "created")
    return calls


def one_case(n: int, *, stamp: bool) -> None:
    base1 = LedgerSnapshot(calls=tuple(_run(n, "t-base1", 0, stamp=stamp)))
    base2 = LedgerSnapshot(calls=tuple(_run(n, "t-base2", 0, stamp=stamp)))
    case = LedgerSnapshot(calls=tuple(_run(n, "t-case", 0, stamp=stamp, kill_at=n // 2 + 7)))
    volatile = volatile_fields(base1, base2)
    attempts = [Attempt(number=1, kill=None, outcome="killed", returncode=-9, duration_ms=1.0)]
    violations = judge(base1, case, attempts, volatile=volatile)
    assert not violations, violations[:3]
    assert summarize(base1, case, volatile=volatile)["payments"]["exactly_once"] == n
    json.dumps(case.to_dict())  # the report's ledger section


def bench_effects(quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in SIZES[:3] if quick else SIZES:
        for stamp in (False, True):
            tag = f"effects_{n}{'_stamped' if stamp else ''}"
            gc.collect()
            t0 = time.perf_counter()
            one_case(n, stamp=stamp)
            took = time.perf_counter() - t0
            tracemalloc.start()
            one_case(n, stamp=stamp)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            out[f"{tag}_case_s"] = took
            out[f"{tag}_us_per_effect"] = 1e6 * took / n
            out[f"{tag}_harness_mb"] = peak / 2**20
    return out


GOALS = {"effects_100000_case_s": lambda v: v < 2.0, "effects_100000_stamped_case_s": lambda v: v < 2.0}


if __name__ == "__main__":
    for name, value in bench_effects("--quick" in sys.argv).items():
        goal = GOALS.get(name)
        mark = "" if goal is None else ("  (goal met)" if goal(value) else "  (GOAL MISSED)")
        print(f"{name}: {value:.3f}{mark}")
