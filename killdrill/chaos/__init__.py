"""Chaos: many random kill schedules over one discovered run, shrunk failures, a regression corpus.

The pipeline of a job (Jepsen's generator and checker): ``strategies`` draws schedules in
timing-free coordinates, ``case`` runs and judges one, ``pool`` deals cases to worker processes,
``shrink`` reduces a failure to its simplest schedule, ``corpus`` keeps it as a regression,
``report`` and ``progress`` say what happened; ``job`` runs the whole. May import ``drill`` and
everything below it. The public names load on first use, so ``killdrill.strategies`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["VIOLATED", "ChaosOptions", "ChaosResult", "chaos_case", "run_chaos"]

if TYPE_CHECKING:
    from killdrill.chaos.job import VIOLATED, ChaosOptions, ChaosResult, chaos_case, run_chaos


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'killdrill.chaos' has no attribute {name!r}")
    from killdrill.chaos import job

    return getattr(job, name)
