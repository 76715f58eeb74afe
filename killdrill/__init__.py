"""killdrill: kill an agent for real at named boundaries, resume it, prove each effect landed once.

Agents import this package for ``boundary``/``node`` on every start, so importing it stays
cheap: the harness side (supervisor, ledger, verdict) loads lazily on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from killdrill.agent import ControlChannelError, armed, boundary, node

__version__ = "0.1.0"

# name -> module that defines it; imported on first attribute access.
_LAZY = {
    "Drill": "killdrill.drill",
    "DrillOptions": "killdrill.drill",
    "CaseResult": "killdrill.drill",
    "DrillResult": "killdrill.drill",
    "ExactlyOnceViolation": "killdrill.drill",
    "run": "killdrill.drill",
    "discover": "killdrill.drill",
    "parse_schedule": "killdrill.points",
    "ScheduleError": "killdrill.points",
}

__all__ = [
    "CaseResult",
    "ControlChannelError",
    "Drill",
    "DrillOptions",
    "DrillResult",
    "ExactlyOnceViolation",
    "ScheduleError",
    "__version__",
    "armed",
    "boundary",
    "discover",
    "node",
    "parse_schedule",
    "run",
]

if TYPE_CHECKING:
    from killdrill.drill import (
        CaseResult,
        Drill,
        DrillOptions,
        DrillResult,
        ExactlyOnceViolation,
        discover,
        run,
    )
    from killdrill.points import ScheduleError, parse_schedule


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'killdrill' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
