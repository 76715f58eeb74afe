"""What the harness knows about each integration, in one place.

An integration emits kill points for a framework without edits to the agent (see
:mod:`killdrill.integrations.langgraph`).  The drill needs two facts about it: which modules a
fork template should import once (``--launcher fork``), and which step names are the
integration's own machinery rather than the agent's steps (LangGraph's ``checkpoint``: a resume
that saves a checkpoint again has not re-done any work).

Imported by the agent too (through its integration module): standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["INTEGRATIONS", "Integration", "internal_steps", "preload_modules"]


@dataclass(frozen=True)
class Integration:
    """One integration: its ``--integration`` name, its fork-template preloads, its own steps."""

    name: str
    preload: tuple[str, ...] = ()
    internal_steps: frozenset[str] = frozenset()


INTEGRATIONS: dict[str, Integration] = {
    "langgraph": Integration(
        "langgraph", preload=("langgraph.graph",), internal_steps=frozenset({"checkpoint"})
    ),
}


def preload_modules(names: Iterable[str]) -> list[str]:
    """Modules a fork template imports for the enabled integrations ``names``."""
    return [m for n in names if n in INTEGRATIONS for m in INTEGRATIONS[n].preload]


def internal_steps() -> frozenset[str]:
    """Step names no agent step is judged by, whichever integration emitted them (a trace read
    back from a report does not say which integrations were on)."""
    return frozenset().union(*(i.internal_steps for i in INTEGRATIONS.values()))
