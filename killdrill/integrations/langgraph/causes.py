"""LangGraph's causes: how to resume a thread the checkpointer still holds tasks of."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from killdrill.integrations import Cause

if TYPE_CHECKING:
    from killdrill.records import Attempt, Violation

__all__ = ["UNFINISHED_FIX", "causes"]

UNFINISHED_FIX = (
    "resume whenever the thread is not finished: snap = graph.get_state(config); if snap.next or "
    "snap.tasks: graph.invoke(None, config) (a step whose writes were saved before the kill is a task, "
    "not next)"
)


def causes(v: Violation, attempts: Sequence[Attempt]) -> Cause | None:
    """LangGraph's way to resume a thread the checkpointer still holds tasks of."""
    if v.cause == "unfinished_resume":
        return Cause(v.cause, v.observed or "", UNFINISHED_FIX)
    return None
