"""CrewAI Flows integration: kill points for every method of an unmodified ``Flow``.

Activated by the drill with ``--integration crewai`` (the bootstrap calls :func:`activate` at
interpreter start).  Activation never imports CrewAI: an import hook registers the points when
the agent imports ``crewai.hooks.dispatch`` and patches persistence when it imports
``crewai.flow.persistence.decorators``.

Points emitted (``METHOD`` is the flow method's name as written):

``before:METHOD``
    CrewAI's public ``PRE_STEP`` hook for a flow method: the method is about to run.
``after:METHOD``
    the ``POST_STEP`` hook: the method returned, its state is not yet persisted.  A kill here
    re-runs the method on resume (whatever the resume, its completion was never saved).
``committed:METHOD``
    ``PersistenceDecorator.persist_state`` returned for that method: ``@persist``'s backend
    (``SQLiteFlowPersistence.save_state`` by default) saved the state after it.  Not emitted for a
    method without ``@persist``.  What a resume does with that state is the flow's business: a flow
    restarted with ``kickoff(inputs={"id": ...})`` reloads the state but runs every method again.

With ``--answer``, a ``@human_feedback`` method's console question is answered by the scripted
human (:mod:`killdrill.integrations.crewai.answers`).

Telemetry: CrewAI starts an OpenTelemetry exporter and a tracing client unless told not to;
:func:`activate` sets ``CREWAI_DISABLE_TELEMETRY``, ``OTEL_SDK_DISABLED`` and
``CREWAI_TRACING_ENABLED=false`` (unless the drill's environment already sets them) so no
attempt tries the network.

Imported by the agent at start (bootstrap): standard library only.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.agent import boundary
from killdrill.integrations import Integration, Probe, _answers
from killdrill.integrations._imports import PatchOnImport

if TYPE_CHECKING:
    pass

__all__ = ["INTEGRATION", "QUIET_ENV", "activate", "active", "deactivate"]

INTEGRATION = Integration(
    "crewai",
    title="CrewAI Flows",
    distributions=("crewai",),
    modules=("crewai",),
    hint="flow method",
    probe=Probe(
        "killdrill.conform.probes.crewai_probe",
        order=2,
        distribution="crewai",
        extra="crewai",
        install_note="in a venv of its own: crewai pins openai<3, which openai-agents cannot share",
        options={"timeout": 120.0},
    ),
    examples=("killdrill.examples.onboarding_crewai",),
    # What a fork template imports once: CrewAI's import is ~5-9 s of an attempt.  Every Flow's
    # __init__ then builds a Memory whose LanceDB storage imports lancedb: another ~8-10 s, almost
    # all of it lancedb's thread-free dependencies (the generated lance-namespace client, pyarrow),
    # preloaded here.  lancedb itself starts a thread at import (forking after it is unsafe): each
    # attempt still imports it, ~1-2 s.
    preload=(
        "crewai.flow.flow",
        "crewai.flow.persistence",
        "pyarrow.compute",
        "pyarrow.dataset",
        "lance_namespace_urllib3_client",
    ),
    answers=True,
)

QUIET_ENV = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
}
"""Set (when unset) before CrewAI is imported: no telemetry thread, no trace upload."""

_DISPATCH = "crewai.hooks.dispatch"
_PERSIST = "crewai.flow.persistence.decorators"
_RUNTIME = "crewai.flow.runtime"
_TARGETS = (_DISPATCH, _PERSIST, _RUNTIME)
_lock = threading.RLock()


def _step_name(ctx: Any) -> str | None:
    if getattr(ctx, "kind", None) != "flow_method":
        return None
    name = getattr(ctx, "step_name", None)
    return str(name) if name else None


def _pre_step(ctx: Any) -> None:
    name = _step_name(ctx)
    if name is not None:
        boundary(f"before:{name}")


def _post_step(ctx: Any) -> None:
    name = _step_name(ctx)
    if name is not None:
        boundary(f"after:{name}")


def _patch_dispatch(module: ModuleType) -> Callable[[], None]:
    point = module.InterceptionPoint
    module.register(point.PRE_STEP, _pre_step)
    module.register(point.POST_STEP, _post_step)

    def undo() -> None:
        module.unregister(point.PRE_STEP, _pre_step)
        module.unregister(point.POST_STEP, _post_step)

    return undo


def _patch_persist(module: ModuleType) -> Callable[[], None]:
    cls = module.PersistenceDecorator
    original = cls.__dict__["persist_state"]  # the classmethod object itself
    func = original.__func__

    @functools.wraps(func)
    def persist_state(klass: Any, flow_instance: Any, method_name: str, *args: Any, **kwargs: Any) -> Any:
        result = func(klass, flow_instance, method_name, *args, **kwargs)
        boundary(f"committed:{method_name}")
        return result

    cls.persist_state = classmethod(persist_state)

    def undo() -> None:
        cls.persist_state = original

    return undo


def _patch_feedback(module: ModuleType) -> Callable[[], None]:
    from killdrill.integrations.crewai.answers import wrap_request

    cls = module.Flow
    original = cls.__dict__["_request_human_feedback"]
    cls._request_human_feedback = wrap_request(original)

    def undo() -> None:
        cls._request_human_feedback = original

    return undo


def _patch(module: ModuleType) -> None:
    with _lock:
        if module.__name__ in _patched:
            return
        if module.__name__ == _DISPATCH:
            _patched[module.__name__] = _patch_dispatch(module)
        elif module.__name__ == _PERSIST:
            _patched[module.__name__] = _patch_persist(module)
        elif module.__name__ == _RUNTIME and _answers.configured():
            _patched[module.__name__] = _patch_feedback(module)


_hook = PatchOnImport(_TARGETS, _patch)
_patched = _hook.undos  # module name -> the undo of its patch


def activate() -> None:
    """Emit kill points for every CrewAI Flow in this process (idempotent); CrewAI stays unimported."""
    with _lock:
        for name, value in QUIET_ENV.items():
            os.environ.setdefault(name, value)
        _hook.install()


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for CrewAI's import)."""
    return _hook.active


def deactivate() -> None:
    """Undo :func:`activate` (for in-process tests)."""
    with _lock:
        _hook.undo()
