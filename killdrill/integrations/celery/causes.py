"""What a Celery case's hang means, as the broker and the kills show it (the record's ``causes``).

A task the broker still holds unacknowledged comes back after the visibility timeout; a task the
broker holds nowhere was taken by a worker that died before recording it: on Redis, kombu pops a
message with ``BRPOP`` and only then writes it to the ``unacked`` hash, so a worker killed between
the two loses it, ``acks_late`` or not (the point ``during:redis.brpop``)."""

from __future__ import annotations

from collections.abc import Sequence

from killdrill.integrations import Cause
from killdrill.integrations.celery.acks import POP_POINT
from killdrill.records import HANG, RESUME_FAILED, Attempt, Violation

__all__ = ["NOT_TAKEN_CAUSE", "NOT_TAKEN_FIX", "POP_WINDOW_CAUSE", "POP_WINDOW_FIX", "causes"]

POP_WINDOW_CAUSE = "redis_pop_window"
POP_WINDOW_FIX = (
    "no code in the task can keep this message: kombu's Redis transport pops it (BRPOP) before it "
    "records it as unacknowledged, and has no option that closes the gap (kombu 5.x: no BLMOVE or "
    "reliable-queue mode). Run the worker on RabbitMQ (a delivery stays on the broker until its "
    "ack; quorum queues also survive a broker restart), or have the submitter send an order again "
    "under the same task id when its result does not come (the task's effects keyed by the order "
    "make the second delivery replay them)"
)

NOT_TAKEN_CAUSE = "task_not_taken"
NOT_TAKEN_FIX = (
    "keep a worker consuming the task's queue after a kill (the killed service restarted, or a second "
    "replica, its -Q including the queue), and give the case longer than the visibility timeout "
    "(--timeout above --visibility-timeout, 3 s by default) for the task to come back"
)


def _killed_workers(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The services killed at a fault of their own: not one killed as another fault's target
    (``restart=redis:worker:...`` kills the broker, not a worker holding a task)."""
    return [
        a
        for a in attempts
        if a.killed_at and a.process not in (None, "driver") and not _target_of(a.killed_at, a.process or "")
    ]


def _target_of(label: str, process: str) -> bool:
    """Is ``process`` the target named by a ``KIND=TARGET:TRIGGER`` fault ``label``?"""
    head = label.split(":", 1)[0]
    return "=" in head and head.split("=", 1)[1] in (process, process.split("[", 1)[0])


def causes(v: Violation, attempts: Sequence[Attempt]) -> Cause | None:
    """A hang after a worker was killed in the Redis pop window, or whose broker holds none of
    the run's tasks after a worker was killed (the same window, reached by a timed kill)."""
    if v.kind not in (HANG, RESUME_FAILED):
        return None
    popped = [a for a in attempts if a.killed_at and a.killed_at.startswith(POP_POINT)]
    if popped:
        a = popped[0]
        who = f" ({a.process})" if a.process else ""
        return Cause(
            POP_WINDOW_CAUSE,
            f"attempt {a.number}{who} was killed at {a.killed_at}: Redis had popped a task's message "
            "for it and kombu had not yet written it to the unacked hash, so the message is in no "
            "Redis key (neither its queue nor unacked) and no worker will ever get it: the task is "
            "lost and whoever waits for its result waits forever",
            POP_WINDOW_FIX,
        )
    held = (v.detail or {}).get("runtime") or {}
    killed = _killed_workers(attempts)
    nothing_held = held.get("unacked") == 0 and not any((held.get("waiting") or {}).values())
    if v.kind == HANG and killed and nothing_held:
        names = ", ".join(f"attempt {a.number} ({a.process}) at {a.killed_at}" for a in killed)
        return Cause(
            POP_WINDOW_CAUSE,
            f"the broker holds none of the run's tasks (none waiting, none unacknowledged) after a "
            f"worker was killed ({names}): a task whose result never came was taken by the killed "
            "worker and never recorded, which on Redis is the moment between BRPOP and the unacked "
            f"hash ({POP_POINT})",
            POP_WINDOW_FIX,
        )
    if v.kind == HANG and held.get("unacked") is not None and not nothing_held:
        waiting = sum((held.get("waiting") or {}).values())
        return Cause(
            NOT_TAKEN_CAUSE,
            f"the broker still holds {held.get('unacked')} unacknowledged and {waiting} waiting task(s) of "
            "the run when the attempt was stopped: no live worker took them (Redis hands an "
            f"unacknowledged task on after its visibility timeout, {held.get('visibility_timeout_s', 0):g} s "
            "here, and only to a worker consuming its queue)",
            NOT_TAKEN_FIX,
        )
    return None
