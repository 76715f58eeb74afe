"""What the Temporal dev server says of a namespace's workflows, as plain data: a pending
activity (``explain_hang``) and the waits one workflow's history shows (``waits``), read from the
SDK's protobuf messages the server module fetches (harness side only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["activity_phrase", "held", "pending_activity"]


def _ago(stamp: Any, now: float) -> float:
    return round(now - float(stamp.ToMicroseconds()) / 1e6, 1)


def _seconds(duration: Any) -> float | None:
    s = duration.ToMicroseconds() / 1e6
    return round(s, 3) if s else None


def pending_activity(a: Any, now: float, states: Any) -> dict[str, Any]:
    """One ``PendingActivityInfo`` as plain data (times as seconds ago, timeouts in seconds)."""
    opts = a.activity_options if a.HasField("activity_options") else None
    beat = a.last_heartbeat_time if a.HasField("last_heartbeat_time") else None
    return {
        "activity_type": a.activity_type.name,
        "activity_id": a.activity_id,
        "state": states.Name(a.state).removeprefix("PENDING_ACTIVITY_STATE_").lower(),
        "attempt": a.attempt,
        "started_s_ago": _ago(a.last_started_time, now) if a.HasField("last_started_time") else None,
        "last_heartbeat_s_ago": _ago(beat, now) if beat is not None else None,
        "last_failure": a.last_failure.message if a.HasField("last_failure") else None,
        "worker": a.last_worker_identity or None,
        "start_to_close_s": _seconds(opts.start_to_close_timeout) if opts is not None else None,
        "heartbeat_timeout_s": _seconds(opts.heartbeat_timeout) if opts is not None else None,
    }


def activity_phrase(a: dict[str, Any]) -> str:
    """``settle_batch (activity 3, started 9.8s ago, attempt 1, no heartbeat, start-to-close 300s)``."""
    parts = [f"activity {a['activity_id']}", a["state"]]
    if a["started_s_ago"] is not None:
        parts[-1] += f" {a['started_s_ago']:g}s ago"
    parts.append(f"attempt {a['attempt']}")
    if a["last_heartbeat_s_ago"] is not None:
        parts.append(f"last heartbeat {a['last_heartbeat_s_ago']:g}s ago")
    else:
        parts.append("no heartbeat")
    if a["heartbeat_timeout_s"]:
        parts.append(f"heartbeat timeout {a['heartbeat_timeout_s']:g}s")
    if a["start_to_close_s"]:
        parts.append(f"start-to-close {a['start_to_close_s']:g}s")
    if a["last_failure"]:
        parts.append(f"last failure: {a['last_failure']}")
    return f"{a['activity_type']} ({', '.join(parts)})"


def held(
    events: Any, workflow_type: str, kinds: Any, timeouts: Any, removed: Sequence[str]
) -> list[dict[str, Any]]:
    """The waits one workflow's history shows (see ``TemporalDevServer.waits``); ``removed``: the
    waits the drill's server removes, said with each."""
    settings = {
        timeouts.TIMEOUT_TYPE_START_TO_CLOSE: "start_to_close_timeout",
        timeouts.TIMEOUT_TYPE_HEARTBEAT: "heartbeat_timeout",
        timeouts.TIMEOUT_TYPE_SCHEDULE_TO_START: "schedule_to_start_timeout",
        timeouts.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE: "schedule_to_close_timeout",
    }
    scheduled: dict[int, Any] = {}
    started_at: dict[int, float] = {}
    task_timeout = 0.0
    out: list[dict[str, Any]] = []
    for e in events:
        at = e.event_time.ToMicroseconds() / 1e6
        if e.event_type == kinds.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            task_timeout = (
                e.workflow_execution_started_event_attributes.workflow_task_timeout.ToMicroseconds() / 1e6
            )
        elif e.event_type == kinds.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes
        elif e.event_type == kinds.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started_at[e.workflow_task_started_event_attributes.scheduled_event_id] = at
        elif e.event_type == kinds.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            attrs = e.workflow_task_timed_out_event_attributes
            out.append(
                {
                    "label": f"Temporal's workflow task timeout (task_timeout, {task_timeout:g} s) of"
                    f" workflow {workflow_type}",
                    "setting": "task_timeout",
                    "setting_s": task_timeout,
                    "unit": f"workflow {workflow_type}",
                    "from": started_at.get(attrs.scheduled_event_id),
                    "to": at,
                    "kept": "the workflow's task timeout, its own setting (the server hands a task a"
                    " dead worker took to another worker only once it expires)",
                    "removed": list(removed),
                }
            )
        elif e.event_type == kinds.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = e.activity_task_started_event_attributes
            failure = attrs.last_failure if attrs.HasField("last_failure") else None
            if attrs.attempt < 2 or failure is None or not failure.HasField("timeout_failure_info"):
                continue
            setting = settings.get(failure.timeout_failure_info.timeout_type)
            act = scheduled.get(attrs.scheduled_event_id)
            if setting is None or act is None:
                continue
            value = getattr(act, setting).ToMicroseconds() / 1e6
            name = act.activity_type.name
            out.append(
                {
                    "label": f"Temporal's {setting} ({value:g} s) of activity {name}",
                    "setting": setting,
                    "setting_s": value,
                    "unit": f"activity {name}",
                    "from": None,
                    "to": at,
                    "kept": f"the activity's {setting}, the agent's own setting (the server learns that"
                    " a killed worker's activity failed only when it expires), then its retry"
                    " policy's backoff",
                    "removed": list(removed),
                }
            )
    return out
