"""What the Celery integration's record and its broker service share: the variables the service
sets in every process of a case (read by the patches in the agent) and the integration's option
rows (their values read by the service).

Below both the record (``celery/__init__``) and the service (``celery/broker``): the record's
factory imports the service when the harness calls it, so the service reads nothing from the
record.  Standard library and ``killdrill.options.kinds`` only: the agent imports it at start.
"""

from __future__ import annotations

from killdrill.options.kinds import Duration, Flag, Option, Text

__all__ = [
    "KEYPREFIX_ENV",
    "OPTIONS",
    "POP_WINDOW_ENV",
    "VISIBILITY_ENV",
    "VISIBILITY_TIMEOUT_S",
]

KEYPREFIX_ENV = "KILLDRILL_CELERY_KEYPREFIX"
"""The case's Redis key prefix (set by the harness for a Redis broker only)."""
POP_WINDOW_ENV = "KILLDRILL_CELERY_POP_WINDOW"
"""``1``: Redis workers emit ``during:redis.brpop`` (set by the harness for ``--pop-window``)."""
VISIBILITY_ENV = "KILLDRILL_CELERY_VISIBILITY_TIMEOUT"
"""Seconds before Redis redelivers an unacknowledged task (set by the harness for Redis, from the
option ``--visibility-timeout``)."""
VISIBILITY_TIMEOUT_S = 3.0
"""The case's visibility timeout unless ``--visibility-timeout`` says otherwise: a killed worker's
task is handed on within seconds (kombu's default is an hour; a live worker keeps its own
deliveries fresh every third of it)."""

OPTIONS: tuple[Option, ...] = (
    Option(
        "broker",
        Text(metavar="URL"),
        None,
        "the broker each case gets its own queues on, redis://... or amqp://... "
        "(default: redis://127.0.0.1:6379/0)",
        "--broker",
        discovery=True,
    ),
    Option(
        "pop_window",
        Flag(),
        False,
        "on Redis, also kill at during:redis.brpop: Redis popped a task's message for the worker "
        "and kombu has not yet recorded it as unacknowledged (a kill there loses the message)",
        "--pop-window",
        discovery=True,
    ),
    Option(
        "visibility_timeout",
        Duration(),
        VISIBILITY_TIMEOUT_S,
        "on Redis, how long a killed worker's unacknowledged task waits before the next worker gets it",
    ),
)
"""The integration's own option rows (``--broker``, ``--pop-window``, ``--visibility-timeout``)."""
