"""Integrations: one folder per framework, whose record declares everything the harness must know.

An integration emits kill points for a framework without edits to the agent.  It is one package
``killdrill/integrations/NAME/`` (or a third party's module, found through the entry-point group
``killdrill.integrations``: ``NAME = "your_package.your_module"``) that defines ``activate()``
(called in the agent at startup, through the bootstrap, when ``--integration NAME`` is on) and
``INTEGRATION``, an :class:`Integration` record.  ``activate`` patches the framework as the agent
imports it (:class:`PatchOnImport`): the integration never imports the framework itself.
Nothing outside the folder names a framework: the setup checks, the CLI, the diagnosis and
``killdrill conform`` read these records.

The record's fields are documented on :class:`Integration`; the hooks' shapes, the service's
protocol, the runtime context and the conform probe in :mod:`killdrill.integrations.contract`
(the plugin contract, one module), which checks a record when it is registered or loaded.

:func:`find` looks a name up as ``killdrill.integrations.NAME``, then in the entry points, then
among the known records' names and aliases.  :func:`register` adds one in-process.

Imported by the agent too (through the bootstrap): standard library and ``killdrill.errors``
only at import (an integration that declares options imports ``killdrill.options.kinds`` too,
standard library only).  A harness-side service module inside a folder (``temporal/server.py``) is
imported by its factory only when the harness calls it, and imports nothing above this layer nor
the record: what the two share (variables, option rows, read with :func:`option_value`) is a
module below both (``temporal/settings.py``).

Layer: beside ledger and effects; may import ``agent``, ``records`` and ``errors`` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import pkgutil
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from killdrill.errors import UsageError
from killdrill.integrations._findings import findings_in
from killdrill.integrations._hooks import ReportedService, called
from killdrill.integrations._imports import PatchOnImport
from killdrill.integrations._work import dones, unfinished, without_work
from killdrill.integrations.contract import (
    Cause,
    CausesHook,
    ExitAbort,
    HookWarning,
    PluginRefused,
    Probe,
    Service,
    ServiceFactory,
    ServiceHost,
    ServiceProcess,
    Timeline,
    WaitsHook,
    check_record,
    check_service,
)
from killdrill.registry import PluginWarning, Registry, nearest, plugin_failed, plugins_disabled

if TYPE_CHECKING:
    from killdrill.options.kinds import Option
    from killdrill.records import Attempt, Violation

__all__ = [
    "ENTRY_POINT_GROUP",
    "Cause",
    "ExitAbort",
    "HookWarning",
    "Integration",
    "IntegrationNotFound",
    "PatchOnImport",
    "PluginRefused",
    "Probe",
    "Service",
    "ServiceHost",
    "ServiceProcess",
    "canonical_names",
    "check_options",
    "dones",
    "exit_aborts",
    "find",
    "findings_in",
    "framework_cause",
    "internal_steps",
    "known",
    "option_rows",
    "option_value",
    "preload_modules",
    "register",
    "rescan",
    "scope",
    "start_services",
    "unfinished",
    "without_work",
]

ENTRY_POINT_GROUP = "killdrill.integrations"


@dataclass(frozen=True)
class Integration:
    """One integration's record: everything the harness must know about its framework.  All but
    ``name`` optional; the hooks' shapes are in :mod:`killdrill.integrations.contract`."""

    name: str
    """What ``--integration`` names, a Python identifier (the folder's or the entry point's name)."""
    preload: tuple[str, ...] = ()
    """Modules a fork template imports once (``--launcher fork``)."""
    internal_steps: frozenset[str] = frozenset()
    """Step names that are the integration's own machinery, not the agent's (``checkpoint``)."""
    activate: Callable[[], None] | None = None
    """Called in the agent at start (filled from the module's ``activate()`` when found)."""
    service: ServiceFactory | None = None
    """``service(root, host, options) -> Service``: the harness-side part (a runtime's server, a
    broker's isolation), started once per drill and closed at its end."""
    exit_abort: ExitAbort | None = None
    """The framework's known abort at interpreter exit after its work is done."""
    title: str = ""
    """The framework's name for people (``"LangGraph"``)."""
    aliases: tuple[str, ...] = ()
    """Other spellings ``--integration`` accepts (case and ``-``/``_`` resolve anyway)."""
    flag: str | None = None
    """A command-line shortcut the CLI adds for it (``"--langgraph"``)."""
    distributions: tuple[str, ...] = ()
    """The framework's distributions: an import of one of :attr:`modules` counts as the framework
    in use only when its file belongs to one of them (the agent's own ``workflows.py`` never does)."""
    modules: tuple[str, ...] = ()
    """The framework's top-level modules the agent imports."""
    hint: str = "node and checkpoint"
    """What it kills at, ending the setup warning ("... to kill it at every acme task")."""
    covers: tuple[tuple[str, str], ...] = ()
    """Frameworks this one runs inside its runtime, each ``(inner integration, module of ours that
    shows it)``: the inner framework imported there is drilled, and no setup warning says so."""
    causes: CausesHook | None = None
    """``causes(violation, attempts) -> Cause | None``, asked first by the diagnosis."""
    probe: Probe | None = None
    """Its probe agent for ``killdrill conform``."""
    examples: tuple[str, ...] = ()
    """Modules of example agents drilled under it."""
    options: tuple[Option, ...] = ()
    """Its own option rows (``killdrill.options.kinds.Option``): a flag, an ini key, a keyword;
    their values are ``DrillOptions.integration_options``, read with :meth:`option`."""
    answers: bool = False
    """It answers a run's pending interrupts with ``--answer``."""
    waits: WaitsHook | None = None
    """``waits(timeline, clean) -> list[Wait]``: the runtime's waits read from a case's attempts."""
    plugin: str = ""
    """The distribution whose entry point declared it (filled when loaded; empty: killdrill's own)."""

    def option(self, options: object, name: str) -> Any:
        """The value of this record's own option ``name`` in a drill's ``options`` (what its
        service is given), or its row's default when the drill was not given it."""
        return option_value(self.options, options, name)


def option_value(rows: Iterable[Option], options: object, name: str) -> Any:
    """The value of the integration's option ``name`` (one of its ``rows``) in a drill's
    ``options``, or its row's default when the drill was not given it: what a service module
    reads from the rows it shares with its record, never importing the record above it."""
    row = next(r for r in rows if r.field == name)
    value = (getattr(options, "integration_options", None) or {}).get(name)
    return row.default if value is None else value


class IntegrationNotFound(UsageError, ImportError):
    """No integration of that name or alias (module, entry point, or registered record)."""


class BrokenPlugin(IntegrationNotFound):
    """An integration's entry point failed to load: skipped by every listing, one line when asked for."""


def register(integration: Integration) -> Integration:
    """Make an integration known in this process (a module or entry point is found by :func:`find`);
    a record that breaks the contract is refused (:class:`PluginRefused`, one line)."""
    check_record(integration)
    return _INTEGRATIONS.register(integration.name, integration)


_FIELDS = frozenset(f.name for f in dataclasses.fields(Integration))


def _from_module(name: str, module: ModuleType, plugin: str = "") -> Integration:
    declared = getattr(module, "INTEGRATION", None)
    if not isinstance(declared, Integration):
        raise IntegrationNotFound(f"integration {name!r}: {module.__name__} declares no INTEGRATION record")
    if declared.name != name:
        raise IntegrationNotFound(f"integration {name!r}: {module.__name__} declares {declared.name!r}")
    activate = getattr(module, "activate", None)
    if declared.activate is None and callable(activate):
        declared = dataclasses.replace(declared, activate=activate)
    if declared.activate is None:
        close = nearest("activate", [n for n in vars(module) if not n.startswith("_") and n != "active"])
        raise PluginRefused(
            f"the integration plugin {name!r} ({module.__name__}) was refused: it has no activate(), the"
            " function the agent's bootstrap calls" + (f" (did you mean {close}?)" if close else "")
        )
    try:
        check_record(declared, module.__name__)
    except PluginRefused as exc:
        raise BrokenPlugin(str(exc)) from None
    return dataclasses.replace(declared, plugin=plugin) if plugin else declared


def _unknown_field(exc: BaseException) -> str:
    """`` (did you mean waits?)`` when ``exc`` is the record refusing a misspelled field."""
    said = str(exc)
    if isinstance(exc, TypeError) and "unexpected keyword argument" in said:
        close = nearest(said.rsplit(" ", 1)[-1].strip("'\""), sorted(_FIELDS))
        return f" (did you mean {close}?)" if close else ""
    return ""


def _module_for(name: str) -> tuple[ModuleType, str] | None:
    """The module that declares ``name``, with the distribution of the entry point that named it."""
    if name.isidentifier():
        try:
            return importlib.import_module(f"{__name__}.{name}"), ""
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the integration exists but needs something missing: say that
    if plugins_disabled():
        return None
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        plugin = ep.dist.name if ep.dist is not None else ep.module
        try:
            loaded = ep.load()
            return (loaded if isinstance(loaded, ModuleType) else importlib.import_module(ep.module)), plugin
        except Exception as exc:  # a broken plugin is one line naming it, never a traceback
            said = plugin_failed("integration", name, ep.value, exc) + _unknown_field(exc)
            raise BrokenPlugin(said) from exc
    return None


def _find_module(name: str) -> Integration | None:
    found = _module_for(name)
    return None if found is None else _from_module(name, *found)


_INTEGRATIONS: Registry[Integration] = Registry("integration", ENTRY_POINT_GROUP, find=_find_module)


def rescan() -> None:
    """Scan the installed integrations again at the next lookup (a distribution installed since)."""
    _installed_names.cache_clear()


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Inside, integrations are found afresh (the entry points rescanned: a distribution installed
    just now is seen) and a :func:`register` lasts until the end; after, the process knows what it
    knew before.  What a test of an integration wraps itself in (``killdrill_plugins``)."""
    global _INTEGRATIONS
    saved = _INTEGRATIONS
    _INTEGRATIONS = Registry("integration", ENTRY_POINT_GROUP, find=_find_module)
    _installed_names.cache_clear()
    try:
        yield
    finally:
        _INTEGRATIONS = saved
        _installed_names.cache_clear()


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
    names = [m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and not m.name.startswith("_")]
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


def record_waits(names: Iterable[str], timeline: Timeline, clean: Attempt) -> list[dict[str, Any]]:
    """The waits the records of ``names`` read from a case's attempts (their ``waits`` hooks, each
    a :class:`~killdrill.integrations.contract.Wait`; one that raises is said, naming it)."""
    then = "the case's waits go without it"
    none: Sequence[Mapping[str, Any]] = ()
    return [
        dict(w)
        for i in _each(names)
        if i.waits is not None
        for w in called(i.name, "waits", i.waits, timeline, clean, fallback=none, then=then)
    ]


def framework_cause(names: Iterable[str], violation: Violation, attempts: Sequence[Attempt]) -> Cause | None:
    """The first cause the ``causes`` hooks of the integrations ``names`` give ``violation`` (one
    that raises is said, naming it, and the drill's own diagnosis stands)."""
    for i in _each(names):
        if i.causes is not None:
            then = "the drill's own diagnosis stands"
            found = called(i.name, "causes", i.causes, violation, attempts, fallback=None, then=then)
            if found is not None:
                return found
    return None


def exit_aborts(names: Iterable[str]) -> list[ExitAbort]:
    """The known aborts at exit of the enabled integrations ``names``."""
    return [i.exit_abort for i in _each(names) if i.exit_abort is not None]


def start_services(
    names: Iterable[str], root: Path, host: ServiceHost, options: object = None
) -> list[Service]:
    """The services of the enabled integrations ``names``, made for a drill rooted at ``root``
    with ``options`` (each starts its process on its first ``env`` call).  Harness side only."""
    out: list[Service] = []
    for i in _each(names):
        if i.service is not None:
            service = i.service(root, host, options)
            check_service(i.name, service)
            out.append(ReportedService(i.name, service))
    return out


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
    from killdrill.options import OPTIONS, OptionError, Rule, spelled_fields

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
            values = {**given, "integrations": options.integrations}
            raise needs.error(values, options.spelled, (*OPTIONS, *rows))
        try:
            out[name] = None if value is None else row.kind.from_value(value)
        except OptionError as exc:
            how = spelled_fields(options, [row])[name]
            raise OptionError(f"{row.spell(how)}: {exc}") from None
    return out
