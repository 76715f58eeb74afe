"""Temporal integration: kill points for every activity of an unmodified Temporal worker.

Activated by the drill with ``--integration temporal`` (``KILLDRILL_INTEGRATIONS=temporal``: the
bootstrap's ``sitecustomize`` calls :func:`activate`), or explicitly with
``killdrill.integrations.temporal.activate()``.  Activation never imports ``temporalio``: an
import hook patches it when the agent imports it.  Nothing is patched inside the workflow
sandbox: workflow code is replayed and must stay deterministic, so every point is on the
worker's activity side or on the client side of the process.  With ``--answer`` alone,
``workflow.wait_condition`` is watched (never changed) so a workflow waiting for a signal gets the
scripted human's answer as that signal (:mod:`killdrill.integrations.temporal.answers`).

Points emitted (``ACTIVITY`` is the activity type as registered: the function name, or the
name given to ``@activity.defn(name=...)``, except pydantic-ai's tool-call activity, named after
the tool it calls; ``TYPE`` is the workflow type):

``before:ACTIVITY``
    the worker got the activity task and is about to call the function (each attempt the
    server dispatches: a retried activity is a new occurrence, ``#2``...).  An activity the
    workflow's history already completed is never run again, so it is no new ``before:``.
``after:ACTIVITY``
    the function returned; its completion is not yet sent to the server.  A kill here makes
    the server retry the activity after its start-to-close (or heartbeat) timeout.
``committed:ACTIVITY``
    the worker's ``complete_activity_task`` returned: the server acknowledged the completion
    (it is in the workflow's history) and will not dispatch the activity again.
``before:workflow.TYPE`` / ``committed:workflow.TYPE``
    the client is about to send ``start_workflow`` / the server recorded the start (not
    emitted when the workflow was already started: the resume attaches to it).
``after:workflow.TYPE``
    the workflow closed and ``WorkflowHandle.result()`` returned its result to the caller.

Every fake call of an activity's body is recorded with the activity's type, id, workflow id and
Temporal's own attempt number (:func:`killdrill.agent.in_runtime`), so a duplicate names the
activity attempts that landed it.  ``INTEGRATION.exit_abort``: the SDK's abort at interpreter exit
once ``result()`` returned the closed workflow (sdk-python#300) is no verdict.

Where the harness runs the Temporal dev server (:mod:`killdrill.process.temporal_server`),
the agent reads its address from ``KILLDRILL_TEMPORAL_ADDRESS`` and its case's namespace from
``KILLDRILL_TEMPORAL_NAMESPACE``.  A client the agent connects anywhere else (the SDK samples'
``Client.connect("localhost:7233")``, a server the user runs, a cloud) is sent to that server and
namespace, said on stderr: a published worker and starter drill without an edit, each case is
isolated from the others, and no drill's workflow reaches a real server.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.agent import armed, boundary, in_runtime, replays
from killdrill.integrations import ExitAbort, Integration, Probe, Service, ServiceHost, _answers
from killdrill.integrations._imports import PatchOnImport
from killdrill.integrations.temporal.settings import ADDRESS_ENV, NAMESPACE_ENV, OPTIONS

if TYPE_CHECKING:
    from pathlib import Path

# Activation runs at interpreter start (bootstrap): stdlib only; temporalio is patched when the
# agent imports it, asyncio only used inside the wrappers (which run in an event loop).

__all__ = [
    "ADDRESS_ENV",
    "INTEGRATION",
    "NAMESPACE_ENV",
    "activate",
    "active",
    "deactivate",
    "point_name",
]


def service(root: Path, host: ServiceHost, options: object = None) -> Service:
    """The drill's dev server (imported here, harness side only: the agent never calls this)."""
    from killdrill.integrations.temporal.server import TemporalDevServer

    return TemporalDevServer(root, host, options)


INTEGRATION = Integration(
    "temporal",
    title="Temporal",
    aliases=("temporalio",),
    distributions=("temporalio",),
    modules=("temporalio",),
    hint="activity",
    preload=("temporalio.client", "temporalio.worker"),  # what a fork template imports once
    service=service,
    probe=Probe(
        "killdrill.conform.probes.temporal_probe",
        order=3,
        distribution="temporalio",
        extra="temporal",
        na={
            "fork_determinism": "the durable state is the server's event history, not a file a drill "
            "can copy; Temporal's own fork is a workflow reset, which is another operation",
        },
        options={"timeout": 60.0},
    ),
    examples=("killdrill.examples.payout_temporal", "killdrill.examples.pydantic_ai_temporal"),
    # sdk-python#300: the SDK's core (a tokio runtime behind PyO3) can crash the interpreter at
    # exit once the workflow closed: SIGABRT (exit 134) or, racing finalization, SIGSEGV
    # (PyO3/pyo3-async-runtimes#40); after:workflow.TYPE is reached only when result() returned it.
    exit_abort=ExitAbort(
        after="after:workflow.",
        note="the Temporal SDK crashed at interpreter exit after the workflow closed (sdk-python#300): "
        "not a verdict",
        signals=(signal.SIGABRT, signal.SIGSEGV),
    ),
    answers=True,
    options=OPTIONS,
    # its plugins run these frameworks inside workflows: their model calls and tools are activities
    covers=(
        ("openai_agents", "temporalio.contrib.openai_agents"),
        ("openai_agents", "temporalio.openai_agents"),
        ("langgraph", "temporalio.contrib.langgraph"),
        ("langgraph", "temporalio.langgraph"),
    ),
)

_ACTIVITY = "temporalio.worker._activity"
_BRIDGE = "temporalio.bridge.worker"
_CLIENT_IMPL = "temporalio.client._impl"
_CLIENT = "temporalio.client._client"
_WORKFLOW = "temporalio.workflow"
_WORKER = "temporalio.worker._worker"
_TARGETS = (_ACTIVITY, _BRIDGE, _CLIENT_IMPL, _CLIENT, _WORKFLOW, _WORKER)
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.\-/\[\]]")
_FINISHED_MAX = 4096
# task token -> point name of an activity whose function returned, popped when it completes.
_finished: dict[bytes, str] = {}
# workflow id -> workflow type, from start_workflow (for after:workflow.TYPE on result()).
_types: dict[str, str] = {}
_lock = threading.RLock()


def point_name(name: str) -> str:
    """The kill-point NAME for an activity or workflow type (odd characters become ``_``)."""
    out = _BAD_CHARS.sub("_", name)
    return out if out[:1] not in ("", ".", "-", "/", "[", "]") else f"_{out}"


async def _reach(point: str) -> None:
    """``boundary(point)`` without stalling the worker's event loop: the supervisor answers in
    well under a millisecond, but a hold (``POINT~5s``) must not stop heartbeats and polls of
    the other activities.  Unarmed (not under a drill) it costs nothing."""
    if not armed():
        return
    import asyncio

    await asyncio.get_running_loop().run_in_executor(None, boundary, point)


def _remember(token: bytes, name: str) -> None:
    with _lock:
        if len(_finished) >= _FINISHED_MAX:
            _finished.pop(next(iter(_finished)), None)
        _finished[token] = name


# ---------------------------------------------------------------- patches


def _tool_name(activity_type: str, input: Any) -> str | None:
    """The tool a pydantic-ai tool-call activity calls, else None.

    pydantic-ai (``TemporalDurability`` / ``TemporalAgent``) runs every call of a function toolset
    as one activity type, ``agent__AGENT__toolset__ID__call_tool``, its first argument naming the
    tool: the point is named after the tool as the agent's code names it, as on DBOS (where the
    tool is a step of its own) and in the OpenAI Agents integration."""
    if not activity_type.endswith("call_tool"):
        return None
    args = getattr(input, "args", None) or ()
    first = args[0] if args else None
    name = getattr(first, "name", None)
    if type(first).__module__.startswith("pydantic_ai.") and hasattr(first, "tool_args") and name:
        return str(name)
    return None


def _wrap_execute_activity(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``_ActivityInboundImpl.execute_activity``: the innermost call of the activity function,
    inside every user interceptor, for async and sync (thread or process pool) activities."""

    @functools.wraps(orig)
    async def execute_activity(self: Any, input: Any) -> Any:
        import temporalio.activity

        info = temporalio.activity.info()
        name = point_name(_tool_name(info.activity_type, input) or info.activity_type)
        await _reach(f"before:{name}")
        # Every fake call of the body records which activity attempt made it (the server's count,
        # not the drill's): a duplicate names them.  Sync activities see it too (temporalio runs
        # them in a copy of this context).
        with in_runtime(
            runtime="temporal",
            unit="activity",
            name=name,
            attempt=info.attempt,
            id=info.activity_id,
            run=info.workflow_id,
        ):
            result = await orig(self, input)
        await _reach(f"after:{name}")
        _remember(info.task_token, name)
        return result

    return execute_activity


def _wrap_complete_activity_task(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The bridge worker's ``complete_activity_task``: returns once the server took the result."""

    @functools.wraps(orig)
    async def complete_activity_task(self: Any, comp: Any) -> Any:
        result = await orig(self, comp)
        with _lock:
            name = _finished.pop(comp.task_token, None)
        if name is not None and comp.result.HasField("completed"):
            await _reach(f"committed:{name}")
        return result

    return complete_activity_task


def _wrap_start_workflow(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def start_workflow(self: Any, input: Any) -> Any:
        name = point_name(f"workflow.{input.workflow}")
        with _lock:
            _types[input.id] = input.workflow
        await _reach(f"before:{name}")
        handle = await orig(self, input)
        await _reach(f"committed:{name}")
        return handle

    return start_workflow


def _wrap_result(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def result(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = await orig(self, *args, **kwargs)
        with _lock:
            wf_type = _types.get(self.id)
        await _reach(f"after:{point_name(f'workflow.{wf_type}' if wf_type else 'workflow')}")
        return out

    return result


_OWN_SERVER_ONLY = ("tls", "api_key", "http_connect_proxy_config")
"""``Client.connect`` arguments that only the agent's own server understands (a cloud's TLS and
key, a proxy to it): the case's dev server is plain local gRPC."""


def _wrap_connect(orig: Callable[..., Any]) -> Any:
    """``Client.connect`` goes to the case's dev server and namespace, whatever address and
    namespace the agent names (the SDK samples' ``localhost:7233``, a server the user runs, a
    cloud).  Cases share nothing then: on a server the drill does not run, concurrent cases' workers
    poll one task queue and run each other's activities (a duplicate recorded in another case's
    ledger, missed), and a clean run of a case's thread attaches to the case's closed workflow; and
    a drill's killed workflows never reach a server the agent uses for real."""
    func = getattr(orig, "__func__", orig)

    @functools.wraps(func)
    async def connect(cls: Any, target_host: str, *args: Any, **kwargs: Any) -> Any:
        address, namespace = os.environ.get(ADDRESS_ENV), os.environ.get(NAMESPACE_ENV)
        if address:
            asked = f"{target_host!r}, namespace {kwargs.get('namespace', 'default')!r}"
            if namespace:
                kwargs["namespace"] = namespace
            dropped = [k for k in _OWN_SERVER_ONLY if kwargs.pop(k, None) is not None]
            print(
                f"killdrill: temporal: Client.connect({asked}) sent to the case's server "
                f"{address}, namespace {kwargs.get('namespace', 'default')}"
                + (f" (without its {', '.join(dropped)})" if dropped else ""),
                file=sys.stderr,
                flush=True,
            )
            target_host = address
        return await func(cls, target_host, *args, **kwargs)

    return classmethod(connect)


def _patch(module: ModuleType) -> None:
    """Patch one of the target modules, once (called right after it executes)."""
    with _lock:
        if module.__name__ == _ACTIVITY:
            owner: Any = module._ActivityInboundImpl
            if (owner, "execute_activity") not in _originals:
                _replace(owner, "execute_activity", _wrap_execute_activity(owner.execute_activity))
        elif module.__name__ == _BRIDGE:
            owner = module.Worker
            if (owner, "complete_activity_task") not in _originals:
                _replace(
                    owner,
                    "complete_activity_task",
                    _wrap_complete_activity_task(owner.complete_activity_task),
                )
        elif module.__name__ == _CLIENT_IMPL:
            owner = module._ClientImpl
            if (owner, "start_workflow") not in _originals:
                _replace(owner, "start_workflow", _wrap_start_workflow(owner.start_workflow))
        elif module.__name__ == _CLIENT:
            owner = module.WorkflowHandle
            if (owner, "result") not in _originals:
                _replace(owner, "result", _wrap_result(owner.result))
            if (module.Client, "connect") not in _originals:
                _replace(module.Client, "connect", _wrap_connect(module.Client.connect))
        elif module.__name__ in (_WORKFLOW, _WORKER) and _answers.configured():
            from killdrill.integrations.temporal import answers

            if module.__name__ == _WORKFLOW and (module, "wait_condition") not in _originals:
                _replace(module, "wait_condition", answers.wrap_wait_condition(module.wait_condition))
            elif module.__name__ == _WORKER and (module.Worker, "__init__") not in _originals:
                _replace(module.Worker, "__init__", answers.remember_worker(module.Worker.__init__))


_hook = PatchOnImport(_TARGETS, _patch)
_replace = _hook.replace
_originals = _hook.originals  # (owner, attribute) -> what was there before the patch


def _replaying() -> bool:
    """In a workflow being replayed from its history (a worker rebuilding its state: every
    workflow task without a cached workflow, every resume): a point an integration stacked in
    the workflow reaches there (the Agents SDK's ``before:TOOL``) was reached by the execution
    the history records, not now, so it is not emitted (:func:`killdrill.agent.replays`)."""
    workflow = sys.modules.get(_WORKFLOW)
    if workflow is None:
        return False
    try:
        return bool(workflow.in_workflow() and workflow.unsafe.is_replaying())
    except Exception:
        return False


def activate() -> None:
    """Emit kill points for every Temporal worker and client in this process (idempotent)."""
    with _lock:
        _hook.install()
        replays(_replaying)


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for temporalio's import)."""
    return _hook.active


def deactivate() -> None:
    """Undo :func:`activate` (for in-process tests)."""
    with _lock:
        _hook.undo()
        replays(_replaying, on=False)
        _finished.clear()
        _types.clear()
