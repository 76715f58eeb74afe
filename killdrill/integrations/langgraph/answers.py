"""LangGraph's scripted human (``--answer``): a root run that stops at ``interrupt()`` is run on with
``Command(resume=ANSWER)``, as the person of LangGraph's documented loop would resume it.

Part of :mod:`killdrill.integrations.langgraph` (which patches ``Pregel.stream``/``astream`` with
these wrappers when the drill gave answers, so ``invoke``/``ainvoke`` answer too, and reports each
root run's stop at an interrupt here).  The seam is the end of a root run: LangGraph has saved the
interrupt's checkpoint, exactly where a person's client would send the resume.  One answer per
pending interrupt (a mapping by interrupt id when several are pending); the interrupt chunks
answered are never yielded, so ``invoke`` returns the finished run.  Which answer an interrupt
gets is durable (:mod:`killdrill.integrations._answers`).  A run that stops with no answer left
ends as LangGraph ends it; the thread view names the interrupt and its node for the drill.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from killdrill.integrations import _answers

__all__ = [
    "answering",
    "described",
    "interrupt_nodes",
    "is_interrupt",
    "note_interrupt",
    "stops",
    "thread_of",
    "waiting",
    "wrap_astream",
    "wrap_stream",
]

_MAX_NODES = 4096


def answering() -> bool:
    """True when the drill gave this process answers (``--answer``)."""
    return _answers.configured()


stops: dict[str, list[Any]] = {}  # thread -> the interrupts its last root run stopped at
interrupt_nodes: dict[str, str] = {}  # interrupt id -> the node that raised it
_INTERRUPT_KEY = "__interrupt__"


def is_interrupt(exc: BaseException) -> bool:
    from langgraph.errors import GraphInterrupt  # loaded: the exception came from it

    return isinstance(exc, GraphInterrupt)


def note_interrupt(node: str, exc: BaseException) -> None:
    """Remember which node raised the interrupts of ``exc`` (an ``Interrupt`` names no node)."""
    if is_interrupt(exc):
        for i in exc.args[0] if exc.args else ():
            if hasattr(i, "id") and len(interrupt_nodes) < _MAX_NODES:
                interrupt_nodes[str(i.id)] = node


def thread_of(config: Any) -> str:
    return str(((config or {}).get("configurable") or {}).get("thread_id"))


def described(interrupt: Any, node: str | None = None) -> dict[str, str]:
    value = repr(getattr(interrupt, "value", None))
    node = node or interrupt_nodes.get(str(interrupt.id), "?")
    return {"node": node, "value": value if len(value) <= 120 else value[:117] + "..."}


def waiting(snap: Any) -> list[dict[str, str]]:
    """The interrupts a state snapshot's tasks wait on."""
    tasks = getattr(snap, "tasks", ()) or ()
    return [described(i, str(t.name)) for t in tasks for i in getattr(t, "interrupts", ()) or ()]


def _chunk_interrupts(chunk: Any) -> list[Any]:
    """The interrupts a streamed chunk carries, whatever the stream mode and version."""
    if isinstance(chunk, tuple) and chunk:
        chunk = chunk[-1]  # (mode, payload) or (namespace, mode, payload)
    if not isinstance(chunk, dict):
        return []
    found: list[Any] = []
    data = chunk
    if "type" in chunk and "data" in chunk:  # a version="v2" part
        found += list(chunk.get("interrupts") or ())
        data = chunk["data"]
    if isinstance(data, dict):
        found += list(data.get(_INTERRUPT_KEY) or ())
    return [i for i in found if hasattr(i, "id")]


def _is_root(config: Any) -> bool:
    """A run the caller started, not a subgraph inside a node (its config inherits the task's)."""
    from langchain_core.runnables.config import ensure_config

    conf = ensure_config(config).get("configurable") or {}
    return "__pregel_task_id" not in conf and not conf.get("checkpoint_ns")


def _held(chunk: Any) -> bool:
    """An interrupt chunk the scripted human answers: the caller never sees it."""
    found = _chunk_interrupts(chunk)
    return bool(found) and _answers.can_answer([str(i.id) for i in found])


def _resume_for(config: Any) -> Any:
    """``Command(resume=...)`` answering the interrupts the run just stopped at, or None (no stop,
    or the answers ran out: the run ends there as LangGraph ends it, the thread view says why)."""
    stopped = stops.pop(thread_of(config), None)
    if not stopped:
        return None
    values = _answers.answers_for([str(i.id) for i in stopped])
    if values is None:
        return None
    from langgraph.types import Command

    if len(stopped) == 1:
        return Command(resume=values[0])
    return Command(resume={str(i.id): v for i, v in zip(stopped, values, strict=True)})


def wrap_stream(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``stream`` (and ``invoke``, which streams) that answers each interrupt the run stops at with
    the next ``--answer`` and runs on, as a person answering through ``Command(resume=...)``."""

    @functools.wraps(orig)
    def stream(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        if not _is_root(config):
            yield from orig(self, input, config, **kwargs)
            return
        while True:
            stops.pop(thread_of(config), None)
            held = []
            for chunk in orig(self, input, config, **kwargs):
                if _held(chunk):
                    held.append(chunk)
                else:
                    yield chunk
            input = _resume_for(config)
            if input is None:
                yield from held
                return

    return stream


def wrap_astream(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def astream(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        if not _is_root(config):
            async for chunk in orig(self, input, config, **kwargs):
                yield chunk
            return
        while True:
            stops.pop(thread_of(config), None)
            held = []
            async for chunk in orig(self, input, config, **kwargs):
                if _held(chunk):
                    held.append(chunk)
                else:
                    yield chunk
            input = _resume_for(config)
            if input is None:
                for chunk in held:
                    yield chunk
                return

    return astream
