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

Telemetry: CrewAI starts an OpenTelemetry exporter and a tracing client unless told not to;
:func:`activate` sets ``CREWAI_DISABLE_TELEMETRY``, ``OTEL_SDK_DISABLED`` and
``CREWAI_TRACING_ENABLED=false`` (unless the drill's environment already sets them) so no
attempt tries the network.

Imported by the agent at start (bootstrap): standard library only.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.abc import Loader
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.agent import boundary
from killdrill.integrations import Integration

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

__all__ = ["INTEGRATION", "QUIET_ENV", "activate", "active", "deactivate"]

INTEGRATION = Integration(
    "crewai",
    # What a fork template imports once: CrewAI's import is ~5-9 s of an attempt.
    preload=("crewai.flow.flow", "crewai.flow.persistence"),
)

QUIET_ENV = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
}
"""Set (when unset) before CrewAI is imported: no telemetry thread, no trace upload."""

_DISPATCH = "crewai.hooks.dispatch"
_PERSIST = "crewai.flow.persistence.decorators"
_TARGETS = (_DISPATCH, _PERSIST)
_lock = threading.RLock()
_patched: dict[str, Callable[[], None]] = {}  # module name -> undo
_finder: _PatchingFinder | None = None


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


def _patch(module: ModuleType) -> None:
    with _lock:
        if module.__name__ in _patched:
            return
        if module.__name__ == _DISPATCH:
            _patched[module.__name__] = _patch_dispatch(module)
        elif module.__name__ == _PERSIST:
            _patched[module.__name__] = _patch_persist(module)


class _PatchingLoader(Loader):
    """Runs the real loader, then patches the module before anyone else uses it."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _patch(module)
        if all(name in sys.modules for name in _TARGETS):
            _remove_finder()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _PatchingFinder:
    """Import hook: wraps the loaders of CrewAI's hook dispatch and persistence decorator only."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def _remove_finder() -> None:
    global _finder
    with _lock:
        if _finder is not None and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        _finder = None


def activate() -> None:
    """Emit kill points for every CrewAI Flow in this process (idempotent); CrewAI stays unimported."""
    global _finder
    with _lock:
        for name, value in QUIET_ENV.items():
            os.environ.setdefault(name, value)
        for name in _TARGETS:
            module = sys.modules.get(name)
            if module is not None:
                _patch(module)
        if not all(name in _patched for name in _TARGETS) and _finder is None:
            _finder = _PatchingFinder()
            sys.meta_path.insert(0, _finder)


def active() -> bool:
    """True when :func:`activate` ran (patched, or waiting for CrewAI's import)."""
    return _finder is not None or bool(_patched)


def deactivate() -> None:
    """Undo :func:`activate` (for in-process tests)."""
    with _lock:
        _remove_finder()
        for undo in _patched.values():
            undo()
        _patched.clear()
