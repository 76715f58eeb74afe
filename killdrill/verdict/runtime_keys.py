"""What a durable runtime's own retries say about a key: a key built from the runtime's attempt
number is new on every retry of the step, in a new process or in the same one."""

from __future__ import annotations

import re
from collections.abc import Sequence

from killdrill.records import Call

__all__ = ["runtime_attempt_in_key"]


def runtime_attempt_in_key(calls: Sequence[Call]) -> str:
    """How the keys of one effect's calls follow the durable runtime's own attempt number (the
    ``attempt`` of each call's runtime context, :func:`killdrill.agent.in_runtime`), or ``""``.

    Every call with a context must carry an attempt number, the calls must span two runtime
    attempts or more, and each key with its number taken out must be one and the same key: then
    the number is what changed the key, whether the retry landed in a new process or in the
    same one."""
    keyed = [c for c in calls if c.key is not None and c.context and c.context.get("attempt") is not None]
    if len(keyed) < 2 or len(keyed) != len([c for c in calls if c.context]):
        return ""
    numbers = {str(c.context["attempt"]) for c in keyed if c.context}
    if len(numbers) < 2 or len({c.key for c in keyed}) < 2:
        return ""
    stems = set()
    for c in keyed:
        n = re.escape(str(c.context["attempt"])) if c.context else ""
        found = list(re.finditer(rf"(?<![0-9]){n}(?![0-9])", str(c.key)))
        if not found:
            return ""
        last = found[-1]
        stems.add(f"{str(c.key)[: last.start()]}{{attempt}}{str(c.key)[last.end() :]}")
    if len(stems) != 1:
        return ""
    ctx = keyed[0].context or {}
    head = " ".join(str(ctx[k]) for k in ("runtime", "unit", "name") if ctx.get(k) not in (None, ""))
    shown = ", ".join(f"attempt {c.context['attempt']} sent {c.key}" for c in keyed[:3] if c.context)
    return f"the key includes the runtime's attempt number, {stems.pop()} ({head or 'the runtime'}'s {shown})"
