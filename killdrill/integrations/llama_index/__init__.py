"""LlamaIndex Workflows integration: kill points for every ``@step`` of an unmodified ``Workflow``.

Activated by the drill with ``--integration llama_index`` (the bootstrap calls :func:`activate`).
Activation never imports ``workflows`` (the ``llama-index-workflows`` distribution, which
``llama_index.core.workflow`` re-exports): an import hook patches it when the agent imports it.

Points emitted (``STEP`` is the step function's name as written):

``before:STEP``
    the runtime's step worker (``as_step_worker_function``) is about to run the step.
``after:STEP``
    the step returned and its output is not yet handed back to the control loop.  Not emitted
    when the step raised (a retry is a new ``before:``).
``before:checkpoint``
    the agent called ``Context.to_dict()``: a snapshot is about to be taken.
``committed:checkpoint``
    the consumer of ``handler.stream_events()`` asked for the next event after a ``to_dict()``:
    the loop body that took the snapshot (and, in the documented pattern, wrote it somewhere)
    finished.

There is no ``committed:STEP``: the basic runtime persists nothing by itself, and where the
user's own write of ``to_dict()`` lands is invisible to the harness.  ``committed:checkpoint`` is
the nearest honest point, and only for the documented "save it while streaming" pattern; a
snapshot saved elsewhere gets only ``before:checkpoint``.

With ``--answer``, a step waiting in ``ctx.wait_for_event`` is sent the scripted human's answer
through the handler's stream (:mod:`killdrill.integrations.llama_index.answers`).

Imported by the agent at start (bootstrap): standard library only.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncGenerator, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.agent import boundary
from killdrill.integrations import Integration, Probe, _answers
from killdrill.integrations._imports import PatchOnImport

if TYPE_CHECKING:
    pass

__all__ = ["CHECKPOINT", "INTEGRATION", "activate", "active", "deactivate"]

CHECKPOINT = "checkpoint"
"""The name used by ``before:checkpoint`` / ``committed:checkpoint``."""

INTEGRATION = Integration(
    "llama_index",
    title="LlamaIndex Workflows",
    aliases=("llamaindex", "llama-index-workflows"),
    # llama-index-workflows installs ``workflows``, which ``llama_index.core.workflow`` imports too
    distributions=("llama-index-workflows",),
    modules=("workflows",),
    hint="workflow step",
    preload=("workflows", "workflows.runtime.types.step_function"),
    internal_steps=frozenset({CHECKPOINT}),
    probe=Probe(
        "killdrill.conform.probes.llama_index_probe",
        order=1,
        quick=True,
        distribution="llama-index-workflows",
        extra="llama-index",
        # the basic runtime persists nothing: the user's save of Context.to_dict() after a step's
        # event is the record (the integration's committed:checkpoint, #2 = after charge)
        committed="committed:checkpoint#2",
        committed_means="the runner saved Context.to_dict() at charge's progress event, the documented"
        " save-while-streaming pattern; the runtime itself persists nothing",
    ),
    examples=("killdrill.examples.ticket_llama_index",),
    answers=True,
)

_STEPS = "workflows.runtime.types.step_function"
_CONTEXT = "workflows.context.context"
_HANDLER = "workflows.handler"
_TARGETS = (_STEPS, _CONTEXT, _HANDLER)
_lock = threading.RLock()
_snapshot_taken = threading.local()


def _failed(outputs: Any) -> bool:
    """True when the step worker's outputs say the step raised (``StepWorkerFailed``)."""
    return isinstance(outputs, list) and any(getattr(o, "type", None) == "failed" for o in outputs)


def _patch_steps(module: ModuleType) -> Callable[[], None]:
    original = module.as_step_worker_function

    @functools.wraps(original)
    def as_step_worker_function(func: Any) -> Any:
        worker = original(func)

        async def emitting_worker(state: Any, step_name: str, *args: Any, **kwargs: Any) -> Any:
            boundary(f"before:{step_name}")
            outputs = await worker(state, step_name, *args, **kwargs)
            if not _failed(outputs):
                boundary(f"after:{step_name}")
            return outputs

        for attr in ("__name__", "__qualname__", "__wrapped__"):
            if hasattr(worker, attr):
                setattr(emitting_worker, attr, getattr(worker, attr))
        return emitting_worker

    setattr(module, "as_step_worker_function", as_step_worker_function)  # noqa: B010

    def undo() -> None:
        setattr(module, "as_step_worker_function", original)  # noqa: B010

    return undo


def _patch_context(module: ModuleType) -> Callable[[], None]:
    cls = module.Context
    original = cls.to_dict

    @functools.wraps(original)
    def to_dict(self: Any, *args: Any, **kwargs: Any) -> Any:
        boundary(f"before:{CHECKPOINT}")
        result = original(self, *args, **kwargs)
        _snapshot_taken.pending = True
        return result

    cls.to_dict = to_dict

    def undo() -> None:
        cls.to_dict = original

    return undo


def _patch_handler(module: ModuleType) -> Callable[[], None]:
    cls = module.WorkflowHandler
    original = cls.stream_events

    @functools.wraps(original)
    async def stream_events(self: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        _snapshot_taken.pending = False
        events = original(self, *args, **kwargs)
        if _answers.configured():
            from killdrill.integrations.llama_index.answers import answering

            events = answering(self, events)
        async for ev in events:
            yield ev
            if getattr(_snapshot_taken, "pending", False):  # the loop body saved a snapshot
                _snapshot_taken.pending = False
                boundary(f"committed:{CHECKPOINT}")

    cls.stream_events = stream_events

    def undo() -> None:
        cls.stream_events = original

    return undo


_PATCHERS: dict[str, Callable[[ModuleType], Callable[[], None]]] = {
    _STEPS: _patch_steps,
    _CONTEXT: _patch_context,
    _HANDLER: _patch_handler,
}


def _patch(module: ModuleType) -> None:
    with _lock:
        if module.__name__ in _PATCHERS and module.__name__ not in _patched:
            _patched[module.__name__] = _PATCHERS[module.__name__](module)


_hook = PatchOnImport(_TARGETS, _patch)
_patched = _hook.undos  # module name -> the undo of its patch


def activate() -> None:
    """Emit kill points for every LlamaIndex Workflow in this process (idempotent)."""
    with _lock:
        _hook.install()


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for the import)."""
    return _hook.active


def deactivate() -> None:
    """Undo :func:`activate` (for in-process tests)."""
    with _lock:
        _hook.undo()
