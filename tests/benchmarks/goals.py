"""A benchmark row's goal, printable: ``Goal("<=", 0.10)`` reads ``<= 0.1`` and judges a value.

Every front of the benchmark prints a row with its goal beside its value, through :func:`line`:
``prefork_speedup: 14.812  (goal >= 20: MISSED)``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Goal:
    op: str
    bound: float

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown comparison {self.op!r}")

    def __call__(self, value: float) -> bool:
        return _OPS[self.op](value, self.bound)

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"


def line(name: str, value: Any, goals: Mapping[str, Goal]) -> str:
    """``name: value`` and, for a row with a goal, the goal and whether this value meets it."""
    text = f"{value:.3f}" if isinstance(value, float) else str(value)
    goal = goals.get(name)
    if goal is None:
        return f"{name}: {text}"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"{name}: {text}  (goal {goal}: not measured)"
    return f"{name}: {text}  (goal {goal}: {'met' if goal(value) else 'MISSED'})"
