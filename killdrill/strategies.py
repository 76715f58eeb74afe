"""Hypothesis strategies of kill schedules, for property tests of your own (public facade).

The implementation is the chaos job's :mod:`killdrill.chaos.strategies`; this module is its
stable import path.
"""

from killdrill.chaos.strategies import (
    START,
    Interval,
    interval_kills,
    interval_of,
    intervals,
    kills,
    named_kills,
    schedules,
    start_kills,
    strata,
    stratified_schedule,
)

__all__ = [
    "START",
    "Interval",
    "interval_kills",
    "interval_of",
    "intervals",
    "kills",
    "named_kills",
    "schedules",
    "start_kills",
    "strata",
    "stratified_schedule",
]
