"""The thread's view an attempt leaves for the drill: the root thread's pending tasks and the
interrupts it waits on, written to ``<workdir>/.killdrill/thread-view-ATTEMPT-PID.json`` whenever
the agent reads its state or a root run ends (the drill reads it to tell a finished run from one
that exited with work left)."""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from killdrill import envvars
from killdrill.integrations.langgraph.answers import waiting

__all__ = ["VIEW_PREFIX", "forget_views", "pending", "record_view", "wrap_aget_state", "wrap_get_state"]

VIEW_PREFIX = "thread-view-"
_lock = threading.Lock()

_views: dict[str, dict[str, Any]] = {}


def record_view(
    config: Any, pending: list[str], source: str, interrupts: Sequence[dict[str, str]] = ()
) -> None:
    """Remember the root thread's pending tasks (and the interrupts it waits on: node and value)
    and write them where the drill reads them."""
    try:
        conf = config.get("configurable") or {}
        if conf.get("checkpoint_ns"):
            return  # a subgraph's view: the root's decides whether the thread is finished
        thread = str(conf.get("thread_id"))
    except AttributeError:
        return
    workdir = os.environ.get(envvars.WORKDIR)
    if not workdir or conf.get("thread_id") is None:
        return
    with _lock:
        _views[thread] = {"pending": pending, "source": source, "interrupts": list(interrupts)}
        state = os.path.join(workdir, ".killdrill")
        path = os.path.join(state, f"{VIEW_PREFIX}{os.environ.get(envvars.ATTEMPT, '0')}-{os.getpid()}.json")
        try:
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"integration": "langgraph", "threads": _views}, fh)
            os.replace(tmp, path)
        except OSError:
            pass


def pending(snap: Any) -> list[str]:
    """Tasks the checkpointer holds for the thread, an interrupt (waiting on a person) aside."""
    return [str(t.name) for t in getattr(snap, "tasks", ()) or () if not getattr(t, "interrupts", ())]


def wrap_get_state(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def get_state(self: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        snap = orig(self, config, *args, **kwargs)
        record_view(config, pending(snap), "get_state", waiting(snap))
        return snap

    return get_state


def wrap_aget_state(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def aget_state(self: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        snap = await orig(self, config, *args, **kwargs)
        record_view(config, pending(snap), "get_state", waiting(snap))
        return snap

    return aget_state


def forget_views() -> None:
    """Drop the views remembered in this process (the integration deactivated)."""
    with _lock:
        _views.clear()
