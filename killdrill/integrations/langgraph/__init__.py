"""LangGraph integration: kill points for every node of an unmodified graph.

Activated by the drill with ``KILLDRILL_INTEGRATIONS=langgraph`` (the supervisor puts
``killdrill/integrations/_bootstrap`` first on ``PYTHONPATH``; its ``sitecustomize`` calls
:func:`activate`), or explicitly with ``killdrill.integrations.langgraph.activate()``.
Activation never imports LangGraph: an import hook patches it when the agent imports it.

Points emitted (``NODE`` is the LangGraph task name: the node name for a StateGraph,
the function name for ``@entrypoint``/``@task``; characters outside the kill-point
grammar become ``_``; LangGraph's own ``__start__``-style tasks are skipped):

``before:NODE``
    the task is about to run (before callbacks and the node body).
``after:NODE``
    the node returned, its writes are not yet handed to the checkpointer: a kill here
    re-runs the node on resume.  Not emitted when the node raised or was interrupted.
``committed:NODE``
    the checkpointer's ``put_writes`` for that task returned (its writes are durable) and the
    step's checkpoint is not saved yet.  A kill here does not re-run the node.  Never emitted
    under ``durability="exit"`` (nothing is saved per step).
``before:checkpoint``
    a checkpoint is about to be saved (``put``), after the previous one and after every
    ``put_writes`` handed to the checkpointer before it.  Its first occurrence in a fresh run is
    the input checkpoint: a kill there is a crash before the first checkpoint (langgraph issue
    8764).

LangGraph saves a step's writes and its checkpoint on background threads in no fixed order
(langgraph issue 8039): left alone, a kill at ``before:checkpoint#N`` would find the step's writes
saved in one run and lost in the next, so one kill point would be two states and its reproduction
line a coin toss (a resume that skips saved writes failed 5 runs in 6).  The integration makes the
save of a checkpoint wait for the writes handed over before it, as LangGraph already does for
delta-channel writes: each point names one state.  The other order is asked for by name:
``KILLDRILL_LANGGRAPH_CHECKPOINT_DELAY=writes=...`` (below) delays the writes and lets the
checkpoint go first, as on a loaded host.
``committed:checkpoint``
    that checkpoint's ``put`` returned.

Parallel tasks of a sync loop (a ``Send`` fan-out) save their writes once the last of them
returned, one save at a time: ``committed:NODE#N`` finds every task of the step run and exactly N
saved, whatever the branches' latencies (``siblings.py``).

The thread as the agent last saw it: each ``get_state``/``aget_state`` of a root graph, and each
root run's end, leave ``<workdir>/.killdrill/thread-view-<attempt>-<pid>.json`` with the thread's
pending tasks (``snap.tasks`` without interrupts: work the checkpointer holds that nobody ran).
The drill reads it when an attempt exits 0: an agent that resumes only ``if snap.next:`` exits
with a task pending (a step whose writes were saved before the kill is a task, not ``next``).
Recorded in the agent, from what LangGraph itself computed, rather than by the drill reading the
checkpoint: the drill does not know where the checkpointer lives (SQLite, Postgres, memory) nor
how to decode it, and the agent's own view is the one its resume decision was made on.

The scripted human (``--answer VALUE``, ``KILLDRILL_ANSWERS``): a root ``stream``/``astream`` (so
``invoke``/``ainvoke`` too) that stops at ``interrupt()`` is run on with ``Command(resume=ANSWER)``, the
next answer (one per pending interrupt, by id, when several are pending), as the person of
LangGraph's documented loop would; the interrupt chunks answered are not yielded.  Which answer an
interrupt gets is durable (``killdrill.integrations._answers``).  A run that stops at an interrupt
with no answer left ends as LangGraph ends it; the thread view names the interrupt and its node.

Forced timing: ``KILLDRILL_LANGGRAPH_CHECKPOINT_DELAY`` delays checkpointer writes so
races that depend on the host's thread scheduling show up on a small machine (with a ``writes``
delay a checkpoint no longer waits for the writes before it: issue 8039's order).  Value:
a comma-separated list of ``[writes=|put=]DURATION[..DURATION]``, e.g. ``5ms`` (every
``put_writes`` and ``put``), ``writes=2ms..20ms`` (only ``put_writes``, uniformly random
per call), ``writes=10ms,put=0ms``.  ``KILLDRILL_LANGGRAPH_DELAY_SEED`` seeds the random
delays.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Sequence
from types import MethodType, ModuleType
from typing import Any

from killdrill.agent import await_decisions, boundary
from killdrill.integrations import Integration, Probe
from killdrill.integrations._imports import PatchOnImport
from killdrill.integrations.langgraph.answers import (
    answering,
    described,
    interrupt_nodes,
    is_interrupt,
    note_interrupt,
    stops,
    thread_of,
    wrap_astream,
    wrap_stream,
)
from killdrill.integrations.langgraph.causes import causes
from killdrill.integrations.langgraph.siblings import SAVES, Siblings
from killdrill.integrations.langgraph.timing import (
    DELAY_ENV,
    DelaySpec,
    delay_from_env,
    parse_delay,
)
from killdrill.integrations.langgraph.view import forget_views, record_view, wrap_aget_state, wrap_get_state

# Activation runs at interpreter start (bootstrap): stdlib only, nothing heavy (asyncio is
# imported by the async wrappers, which only run inside an event loop).

__all__ = [
    "CHECKPOINT",
    "DELAY_ENV",
    "INTEGRATION",
    "DelaySpec",
    "activate",
    "active",
    "deactivate",
    "parse_delay",
    "point_name",
]

CHECKPOINT = "checkpoint"
"""The name used by ``before:checkpoint`` / ``committed:checkpoint``."""

INTEGRATION = Integration(
    "langgraph",
    title="LangGraph",
    flag="--langgraph",
    distributions=("langgraph",),
    modules=("langgraph",),
    hint="node and checkpoint",
    preload=("langgraph.graph",),  # what a fork template imports once
    internal_steps=frozenset({CHECKPOINT}),  # the checkpointer's own points, not an agent step
    causes=causes,
    probe=Probe(
        "killdrill.conform.probes.langgraph_probe",
        order=0,
        quick=True,
        distribution="langgraph",
        extra="langgraph",
        # the resumers' invoke(Command(resume=...)) reads the parked checkpoint before the node
        # runs: held at before:deliver, the one let go first could finish notify before the
        # other read it, and find the thread done (consumed once by timing, not by LangGraph)
        deliver_barrier="before:notify",
        options={"preload": ("langgraph.checkpoint.sqlite",)},
    ),
    examples=("killdrill.examples.settlement_langgraph",),
    answers=True,  # --answer: a pending interrupt() is answered with Command(resume=...)
)

_RUNNER = "langgraph.pregel._runner"
_LOOP = "langgraph.pregel._loop"
_MAIN = "langgraph.pregel.main"
_TARGETS = (_RUNNER, _LOOP, _MAIN)
"""``<workdir>/.killdrill/thread-view-<attempt>-<pid>.json``: the thread as this process last saw it."""
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\-/\[\]]")
# task id -> point name of a task whose node returned; popped when its writes commit.
_finished: dict[str, str] = {}
_FINISHED_MAX = 4096
_lock = threading.RLock()
_delay: DelaySpec | None = None


# ---------------------------------------------------------------- names


def point_name(task_name: str) -> str | None:
    """The kill-point NAME for a LangGraph task, or None for LangGraph's internal tasks."""
    if task_name.startswith("__") and task_name.endswith("__"):
        return None
    name = _BAD_CHARS.sub("_", task_name)
    return name if name[:1] not in ("", ".", "-", "/", "[", "]") else f"_{name}"


def _remember(task_id: str, name: str) -> None:
    if len(_finished) >= _FINISHED_MAX:  # durability="exit": writes never reach put_writes
        _finished.pop(next(iter(_finished)), None)
    _finished[task_id] = name


# ---------------------------------------------------------------- patches


def _wrap_run_with_retry(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def run_with_retry(task: Any, *args: Any, **kwargs: Any) -> Any:
        name = point_name(task.name)
        if name is None:
            return orig(task, *args, **kwargs)
        boundary(f"before:{name}")
        try:
            result = orig(task, *args, **kwargs)
        except Exception as exc:
            note_interrupt(name, exc)
            raise
        boundary(f"after:{name}")
        _remember(task.id, name)
        return result

    run_with_retry._kd_task = True  # type: ignore[attr-defined]  # siblings.py counts it as running
    return run_with_retry


def _wrap_arun_with_retry(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def arun_with_retry(task: Any, *args: Any, **kwargs: Any) -> Any:
        name = point_name(task.name)
        if name is None:
            return await orig(task, *args, **kwargs)
        boundary(f"before:{name}")
        try:
            result = await orig(task, *args, **kwargs)
        except Exception as exc:
            note_interrupt(name, exc)
            raise
        boundary(f"after:{name}")
        _remember(task.id, name)
        return result

    return arun_with_retry


def _instrument_sync_loop(loop: Any) -> None:
    delay = _delay or DelaySpec(None, None)
    put_writes = loop.checkpointer_put_writes
    if put_writes is not None:

        def checkpointer_put_writes(config: Any, writes: Any, task_id: str, *rest: Any) -> Any:
            if delay.writes:
                time.sleep(delay.seconds("writes"))
            await_decisions()  # a save lands as an effect does: not while another point is decided
            with SAVES:  # committed:NAME#N is one state: exactly N tasks' writes saved (siblings.py)
                result = put_writes(config, writes, task_id, *rest)
                name = _finished.pop(task_id, None)
                if name is not None:
                    boundary(f"committed:{name}")
            return result

        checkpointer_put_writes._kd_waits = True  # type: ignore[attr-defined]
        loop.checkpointer_put_writes = checkpointer_put_writes
    put_after_previous = loop._checkpointer_put_after_previous
    if put_after_previous is not None:

        def checkpointer_put_after_previous(
            prev: Any, delta_write_futs: Sequence[Any], *args: Any, writes_before: Sequence[Any] = ()
        ) -> Any:
            # The same waits the original does first, so the point falls right before `put`.
            for fut in delta_write_futs:
                fut.result()
            if prev is not None:
                prev.result()
            if writes_before:
                import concurrent.futures

                concurrent.futures.wait(writes_before)
            boundary(f"before:{CHECKPOINT}")
            if delay.put:
                time.sleep(delay.seconds("put"))
            await_decisions()
            result = put_after_previous(None, (), *args)
            boundary(f"committed:{CHECKPOINT}")
            return result

        checkpointer_put_after_previous._kd_waits = True  # type: ignore[attr-defined]
        loop._checkpointer_put_after_previous = checkpointer_put_after_previous


def _instrument_async_loop(loop: Any) -> None:
    delay = _delay or DelaySpec(None, None)
    put_writes = loop.checkpointer_put_writes
    if put_writes is not None:

        async def checkpointer_put_writes(config: Any, writes: Any, task_id: str, *rest: Any) -> Any:
            import asyncio

            if delay.writes:
                await asyncio.sleep(delay.seconds("writes"))
            result = await put_writes(config, writes, task_id, *rest)
            name = _finished.pop(task_id, None)
            if name is not None:
                boundary(f"committed:{name}")
            return result

        checkpointer_put_writes._kd_waits = True  # type: ignore[attr-defined]
        loop.checkpointer_put_writes = checkpointer_put_writes
    put_after_previous = loop._checkpointer_put_after_previous
    if put_after_previous is not None:

        async def checkpointer_put_after_previous(
            prev: Any, delta_write_futs: Sequence[Any], *args: Any, writes_before: Sequence[Any] = ()
        ) -> Any:
            import asyncio

            if delta_write_futs:
                await asyncio.gather(*delta_write_futs)
            if prev is not None:
                await prev
            if writes_before:
                await asyncio.wait(writes_before)
            boundary(f"before:{CHECKPOINT}")
            if delay.put:
                await asyncio.sleep(delay.seconds("put"))
            result = await put_after_previous(None, (), *args)
            boundary(f"committed:{CHECKPOINT}")
            return result

        checkpointer_put_after_previous._kd_waits = True  # type: ignore[attr-defined]
        loop._checkpointer_put_after_previous = checkpointer_put_after_previous


def _loop_ended(loop: Any, exc_type: Any, exc: BaseException | None = None) -> None:
    """A root run that ended without raising: done (or interrupted, waiting on a person)."""
    config = getattr(loop, "config", None) or {}
    if exc_type is None and getattr(loop, "status", None) in ("done", "interrupt_before", "interrupt_after"):
        record_view(config, [], "run")
    elif exc is not None and not getattr(loop, "is_nested", True) and is_interrupt(exc):
        stopped = [i for i in (exc.args[0] if exc.args else ()) if hasattr(i, "id")]
        stops[thread_of(config)] = stopped
        record_view(config, [], "run", [described(i) for i in stopped])


def _wrap_exit(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def __exit__(self: Any, exc_type: Any, *args: Any) -> Any:
        result = orig(self, exc_type, *args)
        _loop_ended(self, exc_type, args[0] if args else None)
        return result

    return __exit__


def _wrap_aexit(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def __aexit__(self: Any, exc_type: Any, *args: Any) -> Any:
        result = await orig(self, exc_type, *args)
        _loop_ended(self, exc_type, args[0] if args else None)
        return result

    return __aexit__


def _ordered_saves(loop: Any, *, sync: bool) -> None:
    """Make each save wait for what it must follow, so that each point names one state.

    Wraps the loop's ``submit`` (set by ``__enter__``).  A checkpoint save waits for the
    ``put_writes`` submitted before it: a ``put_writes`` future is remembered, and the next
    checkpoint save is handed the ones not yet waited for (failed writes are waited for, never
    raised: LangGraph's own choice of what a failed write does to the save stays its own); not
    under a ``writes=`` delay, which asks for the other order.  In a sync loop, a task's
    ``put_writes`` waits for the tasks still running (``siblings.py``).
    """
    if getattr(loop, "submit", None) is None:
        return
    submit = loop.submit
    pending: list[Any] = []
    before = not (_delay is not None and _delay.writes)
    siblings = Siblings(submit) if sync else None

    def kd_submit(executor: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if before and fn is loop._checkpointer_put_after_previous and getattr(fn, "_kd_waits", False):
            earlier, pending[:] = list(pending), []
            return submit(functools.partial(fn, writes_before=earlier), *args, **kwargs)
        saves = fn is loop.checkpointer_put_writes and getattr(fn, "_kd_waits", False)
        if siblings is None:
            fut = submit(fn, *args, **kwargs)
        elif saves:
            fut = siblings.save(fn, args, kwargs)
        elif getattr(fn, "_kd_task", False):
            fut = siblings.task(fn, args, kwargs)
        else:
            fut = submit(fn, *args, **kwargs)
        if before and saves:
            pending.append(fut)
        return fut

    # A method of the same executor: LangGraph hands ``weakref.WeakMethod(loop.submit)`` to nodes.
    loop.submit = MethodType(kd_submit, submit.__self__)


def _wrap_enter(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def __enter__(self: Any) -> Any:
        result = orig(self)
        _ordered_saves(self, sync=True)
        return result

    return __enter__


def _wrap_aenter(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def __aenter__(self: Any) -> Any:
        result = await orig(self)
        _ordered_saves(self, sync=False)
        return result

    return __aenter__


def _wrap_init(orig: Callable[..., None], instrument: Callable[[Any], None]) -> Callable[..., None]:
    @functools.wraps(orig)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        instrument(self)

    return __init__


def _patch(module: ModuleType) -> None:
    """Patch one of the target modules, once (called right after it executes)."""
    with _lock:
        if module.__name__ == _RUNNER and (module, "run_with_retry") not in _originals:
            _replace(module, "run_with_retry", _wrap_run_with_retry(module.run_with_retry))
            _replace(module, "arun_with_retry", _wrap_arun_with_retry(module.arun_with_retry))
        elif module.__name__ == _LOOP and (module.SyncPregelLoop, "__init__") not in _originals:
            sync_cls, async_cls = module.SyncPregelLoop, module.AsyncPregelLoop
            _replace(sync_cls, "__init__", _wrap_init(sync_cls.__init__, _instrument_sync_loop))
            _replace(async_cls, "__init__", _wrap_init(async_cls.__init__, _instrument_async_loop))
            _replace(sync_cls, "__enter__", _wrap_enter(sync_cls.__enter__))
            _replace(async_cls, "__aenter__", _wrap_aenter(async_cls.__aenter__))
            _replace(sync_cls, "__exit__", _wrap_exit(sync_cls.__exit__))
            _replace(async_cls, "__aexit__", _wrap_aexit(async_cls.__aexit__))
        elif module.__name__ == _MAIN and (module.Pregel, "get_state") not in _originals:
            _replace(module.Pregel, "get_state", wrap_get_state(module.Pregel.get_state))
            _replace(module.Pregel, "aget_state", wrap_aget_state(module.Pregel.aget_state))
            if answering():
                _replace(module.Pregel, "stream", wrap_stream(module.Pregel.stream))
                _replace(module.Pregel, "astream", wrap_astream(module.Pregel.astream))


_hook = PatchOnImport(_TARGETS, _patch)
_replace = _hook.replace
_originals = _hook.originals  # (owner, attribute) -> what was there before the patch


def activate() -> None:
    """Emit kill points for every LangGraph graph in this process (idempotent).

    Patches LangGraph now if it is already imported, otherwise when it is imported.
    Raises ``ValueError`` for a malformed ``KILLDRILL_LANGGRAPH_CHECKPOINT_DELAY``.
    """
    global _delay
    with _lock:
        _delay = delay_from_env()
        _hook.install()


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for LangGraph's import)."""
    return _hook.active


def deactivate() -> None:
    """Undo :func:`activate`: loops created afterwards emit nothing (for in-process tests)."""
    global _delay
    with _lock:
        _hook.undo()
        _finished.clear()
        forget_views()
        stops.clear()
        interrupt_nodes.clear()
        _delay = None
