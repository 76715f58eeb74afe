"""Integrations, found by name: each one is a module that declares what the harness must know.

An integration emits kill points for a framework without edits to the agent (see
:mod:`killdrill.integrations.langgraph`).  It is one module that defines ``activate()`` (called in
the agent at startup, through the bootstrap, when ``--integration NAME`` is on) and
``INTEGRATION``, an :class:`Integration` record with the two facts the drill needs:

- ``preload``: modules a fork template imports once (``--launcher fork``);
- ``internal_steps``: step names that are the integration's own machinery rather than the
  agent's steps (LangGraph's ``checkpoint``: a resume that saves a checkpoint again has not
  re-done any work, and no case is scheduled at it);
- ``service``: ``"module:factory"`` of a service the drill starts once (lazily, harness side
  only: the agent never imports it) and stops when it closes; ``factory(root, options)`` (the
  drill's options) returns an object with ``env(workdir, thread) -> dict`` (added to every
  launch of that workdir: the Temporal dev server's address and the case's namespace) and
  ``close()``; optionally ``explain_hang(workdir, thread) -> (text, detail) | None``, what the
  runtime still holds for that workdir when an attempt hung (Temporal: the open workflow's
  pending activities), said in the ``hang`` violation, and ``release(workdir, thread)``, called
  when that workdir's run is over (a case's last attempt, a clean run): what the run left in the
  service goes (Celery: the run's broker keys or virtual host);
- ``exit_abort``: an :class:`ExitAbort`, when the framework is known to abort the interpreter at
  exit after its work is done (Temporal's SDK, sdk-python#300): an attempt that died of SIGABRT
  (or exited 134 through a shell) right after the point that says the work closed is a clean exit
  with a note, not a crashed resume.

:func:`find` looks ``NAME`` up as the module ``killdrill.integrations.NAME``, then in the entry
point group ``killdrill.integrations`` (``NAME = "your_package.your_module"``): a new integration
is one module, in this package or in another distribution.  :func:`register` adds one in-process.

Imported by the agent too (through the bootstrap): standard library and ``killdrill.errors`` only.

Layer: beside ledger and effects; may import ``agent`` and ``errors`` only.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Protocol

from killdrill.errors import UsageError
from killdrill.registry import Registry

__all__ = [
    "ENTRY_POINT_GROUP",
    "ExitAbort",
    "Integration",
    "IntegrationNotFound",
    "Service",
    "exit_aborts",
    "find",
    "internal_steps",
    "known",
    "preload_modules",
    "register",
    "start_services",
]

ENTRY_POINT_GROUP = "killdrill.integrations"


@dataclass(frozen=True)
class ExitAbort:
    """A framework's own abort at interpreter exit, once its work is done: forgiven only when the
    attempt's last point starts with ``after`` (the integration reached it when the work closed:
    nothing ran after it but the exit), and said in ``note``."""

    after: str
    note: str


@dataclass(frozen=True)
class Integration:
    """One integration: its ``--integration`` name, its fork-template preloads, its own steps."""

    name: str
    preload: tuple[str, ...] = ()
    internal_steps: frozenset[str] = frozenset()
    activate: Callable[[], None] | None = None  # filled from the module's activate() when found
    service: str | None = None  # "module:factory", see the module doc
    exit_abort: ExitAbort | None = None
    answers: bool = False  # answers a run's pending interrupts with --answer (integrations._answers)


class IntegrationNotFound(UsageError, ImportError):
    """No module ``killdrill.integrations.NAME`` and no entry point of that name (or neither
    declares ``INTEGRATION``)."""


def register(integration: Integration) -> Integration:
    """Make an integration known in this process (a module or entry point is found by :func:`find`)."""
    return _INTEGRATIONS.register(integration.name, integration)


def _from_module(name: str, module: ModuleType) -> Integration:
    declared = getattr(module, "INTEGRATION", None)
    if not isinstance(declared, Integration):
        raise IntegrationNotFound(f"integration {name!r}: {module.__name__} declares no INTEGRATION record")
    if declared.name != name:
        raise IntegrationNotFound(f"integration {name!r}: {module.__name__} declares {declared.name!r}")
    activate = getattr(module, "activate", None)
    if declared.activate is None and callable(activate):
        declared = dataclasses.replace(declared, activate=activate)
    return declared


def _module_for(name: str) -> ModuleType | None:
    if name.isidentifier():
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the integration exists but needs something missing: say that
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        loaded = ep.load()
        if isinstance(loaded, ModuleType):
            return loaded
        return importlib.import_module(ep.module)
    return None


def _find_module(name: str) -> Integration | None:
    module = _module_for(name)
    return None if module is None else _from_module(name, module)


_INTEGRATIONS: Registry[Integration] = Registry("integration", ENTRY_POINT_GROUP, find=_find_module)


def find(name: str) -> Integration:
    """The integration called ``name`` (IntegrationNotFound, an ImportError, when there is none)."""
    found = _INTEGRATIONS.get(name)
    if found is None:
        raise IntegrationNotFound(
            f"no integration {name!r}: neither a module killdrill.integrations.{name} nor an entry "
            f"point {name!r} in the group {ENTRY_POINT_GROUP!r}"
        )
    return found


@functools.cache
def _installed_names() -> tuple[str, ...]:
    """This package's integration modules and the entry points' names (scanned once a process)."""
    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return tuple(names + [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)])


def known() -> dict[str, Integration]:
    """Every integration that can be found: this package's modules, the entry points, registered ones."""
    names = list(_installed_names())
    names += list(_INTEGRATIONS.all())
    out: dict[str, Integration] = {}
    for name in dict.fromkeys(names):
        try:
            out[name] = find(name)
        except ImportError:
            continue  # one broken plugin must not hide the others' internal steps
    return out


def preload_modules(names: Iterable[str]) -> list[str]:
    """Modules a fork template imports for the enabled integrations ``names`` (one that cannot be
    found preloads nothing: the agent's bootstrap says in one line that it cannot load it)."""
    out: list[str] = []
    for name in names:
        try:
            out.extend(find(name).preload)
        except ImportError:
            continue
    return out


def internal_steps() -> frozenset[str]:
    """Step names no agent step is judged by, whichever integration emitted them (a trace read
    back from a report does not say which integrations were on)."""
    return frozenset().union(*(i.internal_steps for i in known().values()))


def exit_aborts(names: Iterable[str]) -> list[ExitAbort]:
    """The known aborts at exit of the enabled integrations ``names``."""
    out: list[ExitAbort] = []
    for name in names:
        try:
            rule = find(name).exit_abort
        except ImportError:
            continue
        if rule is not None:
            out.append(rule)
    return out


class Service(Protocol):
    """What an integration's ``service`` factory returns (see the module doc)."""

    def env(self, workdir: Path, thread: str) -> dict[str, str]: ...

    def close(self) -> None: ...


def start_services(names: Iterable[str], root: Path, options: object = None) -> list[Service]:
    """The services of the enabled integrations ``names``, made for a drill rooted at ``root``
    with ``options`` (each starts its process on its first ``env`` call).  Harness side only."""
    out: list[Service] = []
    for name in names:
        try:
            spec = find(name).service
        except ImportError:
            continue  # said in one line by the agent's bootstrap
        if spec:
            module, _, attr = spec.partition(":")
            out.append(getattr(importlib.import_module(module), attr)(root, options))
    return out
