"""The integration's view of the thread when an attempt exited 0: finished, or work left pending.

An integration that can see the framework's checkpointer
leaves ``<workdir>/.killdrill/thread-view-<attempt>-<pid>.json``: per thread, the tasks the
agent's last look at it (or its last run's end) left pending.  An attempt that exits 0 with a
task pending resumed too little (``unfinished_resume``): the drill names that instead of reading
the effects it dropped as lost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from killdrill.drill.errors import STATE_DIR
from killdrill.records import EXITED, Attempt

__all__ = ["VIEW_PREFIX", "interrupts_at_exit", "pending_at_exit", "with_thread_view"]

VIEW_PREFIX = "thread-view-"  # the file name the integrations write


def _views(workdir: Path, attempt: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((workdir / STATE_DIR).glob(f"{VIEW_PREFIX}{attempt}-*.json")):
        try:
            threads = json.loads(path.read_text(encoding="utf-8")).get("threads") or {}
            out.extend(v for v in threads.values() if isinstance(v, dict))
        except (OSError, ValueError, AttributeError):
            continue
    return out


def pending_at_exit(workdir: Path, attempt: int) -> tuple[str, ...]:
    """Tasks some thread was left with by attempt ``attempt``'s processes (empty: finished or unknown)."""
    out = [str(t) for view in _views(workdir, attempt) for t in view.get("pending") or ()]
    return tuple(dict.fromkeys(out))


def interrupts_at_exit(workdir: Path, attempt: int) -> list[tuple[str, str, str]]:
    """``(node, value, kind)`` of each interrupt (``kind``: a node or a tool) a thread of attempt
    ``attempt`` was left waiting on, with no answer: the run stopped for a person the drill has no
    answer for (``--answer``)."""
    out: list[tuple[str, str, str]] = []
    for view in _views(workdir, attempt):
        for i in view.get("interrupts") or ():
            if isinstance(i, dict):
                out.append((str(i.get("node", "?")), str(i.get("value", "")), str(i.get("kind", "node"))))
    return out


def with_thread_view(workdir: Path, batch: Sequence[Attempt]) -> list[Attempt]:
    """The attempts of ``batch``, an attempt that exited 0 with its thread unfinished marked so."""
    out = []
    for a in batch:
        if a.outcome == EXITED and a.returncode == 0:
            pending = pending_at_exit(workdir, a.number)
            waiting = interrupts_at_exit(workdir, a.number)
            pending += tuple(f"{node} (an interrupt with no answer)" for node, _, _ in waiting)
            if pending:
                note = (
                    f"unfinished_resume: exited 0 with the thread unfinished: the checkpointer still "
                    f"holds pending tasks ({', '.join(pending)})"
                )
                a = replace(a, unfinished=pending, notes=(*a.notes, note))
        out.append(a)
    return out
