"""Integrations: one folder per framework, whose record declares everything the harness must know.

An integration emits kill points for a framework without edits to the agent.  It is one package
``killdrill/integrations/NAME/`` (or a third party's module, found through the entry-point group
``killdrill.integrations``: ``NAME = "your_package.your_module"``) that defines ``activate()``
(called in the agent at startup, through the bootstrap, when ``--integration NAME`` is on) and
``INTEGRATION``, an :class:`Integration` record.  ``activate`` patches the framework as the agent
imports it (:class:`PatchOnImport`): the integration never imports the framework itself.
Nothing outside the folder names a framework: the setup checks, the CLI, the diagnosis and
``killdrill conform`` read these records.

The record's fields (all but ``name`` optional):

- ``title``: the framework's name for people ("LangGraph");
- ``aliases``: other spellings ``--integration`` accepts (case and ``-``/``_`` resolve anyway);
- ``flag``: a command-line shortcut (``--langgraph``) the CLI adds for it;
- ``distributions`` / ``modules``: the distributions whose import means the framework is in use,
  and the top-level modules of theirs the agent imports.  An imported module counts only when
  its file belongs to one of the distributions (the agent's own ``workflows.py`` never does);
- ``hint``: what the integration kills at, ending the one-line setup warning ("... to kill it at
  every node and checkpoint");
- ``covers``: frameworks this one runs inside its own runtime, each as (the inner integration's
  name, a module of this one's whose import shows it): Temporal's plugin for the Agents SDK
  (``("openai_agents", "temporalio.contrib.openai_agents")``) turns the SDK's model calls and
  tools into activities, so the SDK imported there is drilled, and no setup warning says its
  integration is off;
- ``preload``: modules a fork template imports once (``--launcher fork``);
- ``internal_steps``: step names that are the integration's own machinery rather than the
  agent's steps (LangGraph's ``checkpoint``);
- ``service``: a callable ``service(root, host, options)`` (``options``: the drill's) returning a
  :class:`Service` the drill starts once (harness side only: the agent never calls it) and closes
  at its end; ``env(workdir, thread)`` adds to every launch of that workdir, the optional
  ``explain_hang(workdir, thread)`` says what the runtime still holds when an attempt hung, and
  the optional ``release(workdir, thread)`` is called when that workdir's run is over (what the
  run left in the service goes).  ``host`` (:class:`ServiceHost`) starts its processes under the
  harness's containment, so the service needs no import of ``process``;
- ``exit_abort``: an :class:`ExitAbort`, when the framework is known to abort the interpreter at
  exit after its work is done (Temporal's SDK, sdk-python#300);
- ``causes``: a hook ``causes(violation, attempts) -> Cause | None`` the diagnosis asks first, for
  a case run under this integration, with the violation's structured facts (its calls, each with
  the runtime context :func:`killdrill.agent.in_runtime` recorded) and the attempts' facts;
- ``options``: option rows of its own (:class:`killdrill.options.kinds.Option`), spelled by every
  front end as the drill's rows are: a CLI flag (``--broker``, for ``killdrill chaos`` too), a
  pytest ini key (``killdrill_broker``), a marker or ``Drill`` keyword (``broker=``), and a
  case's reproduction line.  Their values are ``DrillOptions.integration_options`` (the service
  reads them there), each parsed by its row's kind and given only with the integration on
  (:func:`check_options`); a field the drill or another integration has already is refused;
- ``probe``: its :class:`Probe` for ``killdrill conform``;
- ``examples``: commands that drill a bundled example agent under it.

:func:`find` looks a name up as ``killdrill.integrations.NAME``, then in the entry points, then
among the known records' names and aliases.  :func:`register` adds one in-process.

Imported by the agent too (through the bootstrap): standard library and ``killdrill.errors``
only at import (an integration that declares options imports ``killdrill.options.kinds`` too,
standard library only).  A harness-side service module inside a folder (``temporal/server.py``) is
imported by its factory only when the harness calls it, and imports nothing above this layer.

Layer: beside ledger and effects; may import ``agent``, ``records`` and ``errors`` only.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from killdrill.errors import UsageError
from killdrill.integrations._findings import findings_in
from killdrill.integrations._imports import PatchOnImport
from killdrill.integrations._work import unfinished, without_work
from killdrill.registry import PluginWarning, Registry, nearest, plugin_failed, plugins_disabled

if TYPE_CHECKING:
    from killdrill.options.kinds import Option
    from killdrill.records import Attempt, Violation

__all__ = [
    "ENTRY_POINT_GROUP",
    "Cause",
    "ExitAbort",
    "Integration",
    "IntegrationNotFound",
    "PatchOnImport",
    "Probe",
    "Service",
    "ServiceHost",
    "ServiceProcess",
    "canonical_names",
    "check_options",
    "exit_aborts",
    "find",
    "findings_in",
    "internal_steps",
    "known",
    "option_rows",
    "preload_modules",
    "register",
    "start_services",
    "unfinished",
    "without_work",
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
class Cause:
    """A framework-specific diagnosis: a stable ``name``, what was ``observed``, the ``fix``."""

    name: str
    observed: str
    fix: str


@dataclass(frozen=True)
class Probe:
    """The integration's probe agent for ``killdrill conform``: ``module`` runs as ``python -m
    MODULE --thread T --workdir W`` and makes the steps ``reserve``, ``charge``, ``notify`` (each
    one effect); ``committed`` is the point where the framework has recorded ``charge``, ``rerun``
    the point a re-execution of it reaches again, ``next_point`` the point of the step after it;
    ``deliver_barrier`` where the interrupt form's two concurrent resumers are held together
    (consume-once): a point each reaches with the parked state read and the approval not yet
    consumed, so neither can finish the delivery before the other has read that state."""

    module: str
    distribution: str  # whose version the table shows
    extra: str  # the extra that installs it, as pip normalizes it: pip install -e ".[EXTRA]"
    committed: str = "committed:charge"
    committed_means: str = "the framework recorded the step"
    rerun: str = "before:charge"
    next_point: str = "before:notify"
    deliver_barrier: str = "before:deliver"
    na: Mapping[str, str] = field(default_factory=dict)  # property -> why it does not apply
    options: Mapping[str, Any] = field(default_factory=dict)  # extra DrillOptions fields; "model":
    # True runs the scripted model fake from the YAML beside the probe's module
    install_note: str = ""
    order: int = 100  # the framework's place in the table (lower first)
    quick: bool = False  # in the fast subset CI runs (killdrill conform --quick)


class ServiceProcess(Protocol):
    """A process a :class:`ServiceHost` started."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ServiceHost(Protocol):
    """What the harness lends a service to run its processes contained (dies with the harness)."""

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, stdout: str, stderr: str
    ) -> ServiceProcess: ...

    def kill(self, proc: ServiceProcess) -> None: ...


class Service(Protocol):
    """What an integration's ``service`` returns (see the module doc)."""

    def env(self, workdir: Path, thread: str) -> dict[str, str]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Integration:
    """One integration's record (the module doc says what each field is for)."""

    name: str
    preload: tuple[str, ...] = ()
    internal_steps: frozenset[str] = frozenset()
    activate: Callable[[], None] | None = None  # filled from the module's activate() when found
    service: Callable[[Path, ServiceHost, Any], Service] | None = None
    exit_abort: ExitAbort | None = None
    title: str = ""
    aliases: tuple[str, ...] = ()
    flag: str | None = None
    distributions: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    hint: str = "node and checkpoint"
    covers: tuple[tuple[str, str], ...] = ()  # (inner integration, module of ours that runs it)
    causes: Callable[[Violation, Sequence[Attempt]], Cause | None] | None = None
    probe: Probe | None = None
    examples: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()  # its own option rows (their values: DrillOptions.integration_options)
    answers: bool = False  # answers a run's pending interrupts with --answer (integrations._answers)
    # waits(timeline, clean): what the runtime held after a kill, read from the case's attempts
    # (each with its launch's wall-clock start) beside a clean run's (an Attempt, number 0)
    waits: Callable[[Sequence[tuple[float, Attempt]], Attempt], list[dict[str, Any]]] | None = None

    def option(self, options: object, name: str) -> Any:
        """The value of this record's own option ``name`` in a drill's ``options`` (what its
        service is given), or its row's default when the drill was not given it."""
        row = next(r for r in self.options if r.field == name)
        value = (getattr(options, "integration_options", None) or {}).get(name)
        return row.default if value is None else value


class IntegrationNotFound(UsageError, ImportError):
    """No integration of that name or alias (module, entry point, or registered record)."""


class BrokenPlugin(IntegrationNotFound):
    """An integration's entry point failed to load: skipped by every listing, one line when asked for."""


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
    if plugins_disabled():
        return None
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            loaded = ep.load()
            return loaded if isinstance(loaded, ModuleType) else importlib.import_module(ep.module)
        except Exception as exc:  # a broken plugin is one line naming it, never a traceback
            raise BrokenPlugin(plugin_failed("integration", name, ep.value, exc)) from exc
    return None


def _find_module(name: str) -> Integration | None:
    module = _module_for(name)
    return None if module is None else _from_module(name, module)


_INTEGRATIONS: Registry[Integration] = Registry("integration", ENTRY_POINT_GROUP, find=_find_module)


def _spelling(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def find(name: str) -> Integration:
    """The integration called ``name`` or aliased so, in any case and with ``-`` for ``_``
    (IntegrationNotFound, an ImportError, when there is none)."""
    found = _INTEGRATIONS.get(name)
    if found is None and _spelling(name) != name:
        found = _INTEGRATIONS.get(_spelling(name))
    if found is None:
        wanted = _spelling(name)
        found = next(
            (i for i in known().values() if wanted in {_spelling(a) for a in i.aliases}),
            None,
        )
    if found is None:
        have = known()
        close = nearest(name, sorted(have))
        hint = f"did you mean {close}? " if close else ""
        raise IntegrationNotFound(
            f"unknown integration {name!r}: {hint}known: {', '.join(sorted(have)) or 'none'} (no module "
            f"killdrill.integrations.{name}, no entry point {name!r} in the group {ENTRY_POINT_GROUP!r})"
        )
    return found


def canonical_names(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as the integrations call themselves, each once (an unknown one: a one-line error)."""
    return tuple(dict.fromkeys(find(n).name for n in names))


@functools.cache
def _installed_names() -> tuple[str, ...]:
    """This package's integration folders and the entry points' names (scanned once a process)."""
    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    if plugins_disabled():
        return tuple(names)
    return tuple(names + [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)])


def known() -> dict[str, Integration]:
    """Every integration that can be found: this package's folders, the entry points, registered ones."""
    names = list(_installed_names())
    names += list(_INTEGRATIONS.all())
    out: dict[str, Integration] = {}
    for name in dict.fromkeys(names):
        try:
            found = _INTEGRATIONS.get(name)
        except BrokenPlugin as exc:  # one broken plugin must not hide the others: said once
            if name not in _INTEGRATIONS.broken:
                _INTEGRATIONS.broken[name] = str(exc)
                warnings.warn(PluginWarning(str(exc)), stacklevel=2)
            continue
        except ImportError:
            continue
        if found is not None:
            out[name] = found
    return out


def _each(names: Iterable[str]) -> list[Integration]:
    """The records of ``names``; one that cannot be found is skipped (the agent's bootstrap says
    in one line that it cannot load it)."""
    out: list[Integration] = []
    for name in names:
        try:
            out.append(find(name))
        except ImportError:
            continue
    return out


def preload_modules(names: Iterable[str]) -> list[str]:
    """Modules a fork template imports for the enabled integrations ``names``."""
    return [m for i in _each(names) for m in i.preload]


def internal_steps() -> frozenset[str]:
    """Step names no agent step is judged by, whichever integration emitted them (a trace read
    back from a report does not say which integrations were on)."""
    return frozenset().union(*(i.internal_steps for i in known().values()))


def record_waits(
    names: Iterable[str], timeline: Sequence[tuple[float, Attempt]], clean: Attempt
) -> list[dict[str, Any]]:
    """The waits the records of ``names`` read from a case's attempts (their ``waits`` hooks)."""
    return [w for i in _each(names) if i.waits is not None for w in i.waits(timeline, clean)]


def exit_aborts(names: Iterable[str]) -> list[ExitAbort]:
    """The known aborts at exit of the enabled integrations ``names``."""
    return [i.exit_abort for i in _each(names) if i.exit_abort is not None]


def start_services(
    names: Iterable[str], root: Path, host: ServiceHost, options: object = None
) -> list[Service]:
    """The services of the enabled integrations ``names``, made for a drill rooted at ``root``
    with ``options`` (each starts its process on its first ``env`` call).  Harness side only."""
    return [i.service(root, host, options) for i in _each(names) if i.service is not None]


def _option_owners() -> dict[str, tuple[Integration, Option]]:
    """Every known integration's option rows by field, with the record declaring each; a field or
    flag the drill's table or another integration has already is a one-line UsageError."""
    from killdrill.options import OPTIONS

    taken = {r.field: "the drill's" for r in OPTIONS} | {r.flag: "the drill's" for r in OPTIONS if r.flag}
    owners: dict[str, tuple[Integration, Option]] = {}
    for integration in known().values():
        names = [n for row in integration.options for n in filter(None, (row.field, row.flag))]
        clash = next((n for n in names if n in taken), None)
        if clash is not None:  # that plugin's options are refused, the others' and the drill's work
            said = (
                f"the integration plugin {integration.name!r} declares the option {clash}, already "
                f"{taken[clash]}: its options were skipped"
            )
            if f"{integration.name} options" not in _INTEGRATIONS.broken:
                _INTEGRATIONS.broken[f"{integration.name} options"] = said
                warnings.warn(PluginWarning(said), stacklevel=2)
            continue
        for row in integration.options:
            for name in filter(None, (row.field, row.flag)):
                taken[name] = f"the {integration.name} integration's"
            owners[row.field] = (integration, row)
    return owners


def option_rows(names: Iterable[str] | None = None) -> tuple[Option, ...]:
    """The option rows of the integrations ``names`` (default: every known one), for the front
    ends to spell and a reproduction line to write."""
    wanted = None if names is None else {i.name for i in _each(names)}
    return tuple(row for i, row in _option_owners().values() if wanted is None or i.name in wanted)


def check_options(options: Any) -> dict[str, Any]:
    """``options.integration_options`` (of a DrillOptions) parsed by their rows' kinds.  An option no
    integration declares, one whose integration is off, or a bad value is a one-line OptionError
    naming the option as the caller spelled it (``--broker``, ``killdrill_broker``, ``broker=``)."""
    from killdrill.options import OptionError, Rule, spelled_fields

    given = dict(options.integration_options)
    if not given:
        return given
    owners = _option_owners()
    unknown = sorted(set(given) - set(owners))
    if unknown:
        theirs = ", ".join(f"{f}=" for f in sorted(owners)) or "none"
        raise OptionError(f"unknown option {unknown[0]}=: no integration declares it (theirs: {theirs})")
    rows = [row for _, row in owners.values()]
    enabled = {i.name for i in _each(options.integrations)}
    out: dict[str, Any] = {}
    for name, value in given.items():
        integration, row = owners[name]
        if integration.name not in enabled:
            needs = Rule(
                f"{{{name}}} needs {{integrations}} {integration.name} (an option of that integration)"
            )
            raise needs.error({**given, "integrations": options.integrations}, options.spelled, rows)
        try:
            out[name] = None if value is None else row.kind.from_value(value)
        except OptionError as exc:
            how = spelled_fields(options, [row])[name]
            raise OptionError(f"{row.spell(how)}: {exc}") from None
    return out
