"""The plugin contract: what an integration declares, and what the harness calls, with its shapes.

A plugin author reads this module and ``docs/extending.md``; nothing else.  An integration is a
module with ``activate()`` and ``INTEGRATION``, an :class:`killdrill.integrations.Integration`
record whose optional fields are the hooks typed here:

- ``activate() -> None``: called in the agent at start (the bootstrap), patches the framework
  when the agent imports it (:class:`killdrill.integrations.PatchOnImport`), never imports it;
- ``service: ServiceFactory``, ``(root, host, options) -> Service``: called once per drill,
  harness side; the :class:`Service` it returns adds to every launch's environment (``env``) and
  may ``release`` a finished run, ``explain_hang`` a hung one and say its ``waits``;
- ``causes: CausesHook``, ``(violation, attempts) -> Cause | None``: the diagnosis asks it first
  for a case run under the integration;
- ``waits: WaitsHook``, ``(timeline, clean) -> list[Wait]``: the runtime's waits read from a
  case's attempts, when no service can say them.

The record is checked when it is registered or loaded (:func:`check_record`), the service when
the factory returns it (:func:`check_service`): a hook that is not callable with the arguments
above, or a service method named like a hook but misspelled (``explain_hangs``), refuses that
plugin in one line naming it, and every other plugin works.  A hook that raises while a drill
runs is said in one :class:`HookWarning` line naming the plugin and the hook; the case's verdict
stands without what the hook would have added.

The runtime context (:class:`RuntimeContext`): what an integration passes to
:func:`killdrill.agent.in_runtime` around the user's code in a unit of its runtime; every fake
call made there records it, and the verdict reads the keys typed here.

Imported by the agent (through the integrations): standard library only (``inspect`` only when
a hook is not a plain function).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from killdrill.errors import UsageError
from killdrill.registry import PluginWarning

CO_VARARGS = 0x04  # inspect.CO_VARARGS, without importing inspect

if TYPE_CHECKING:
    from killdrill.records import Attempt, Violation

__all__ = [
    "RECORD_HOOKS",
    "SERVICE_HOOKS",
    "Cause",
    "CausesHook",
    "ExitAbort",
    "Held",
    "HookWarning",
    "PluginRefused",
    "Probe",
    "Restarting",
    "RuntimeContext",
    "Service",
    "ServiceFactory",
    "ServiceHost",
    "ServiceProcess",
    "Timeline",
    "Wait",
    "WaitsHook",
    "check_record",
    "check_service",
]


class RuntimeContext(TypedDict, total=False):
    """The keys of ``in_runtime(**context)`` the verdict reads (any other key is kept as evidence)."""

    runtime: str
    """The integration's name (``"temporal"``): which runtime ran the unit."""
    unit: str
    """The runtime's word for its unit of work: ``"activity"``, ``"step"``, ``"task"``."""
    name: str
    """The unit's name as written in the agent's code (an activity's type, a task's name)."""
    attempt: int
    """The runtime's own retry number of this unit, from 1 (not the drill's attempt: a runtime
    may retry a unit inside one process).  Two calls of one effect under different numbers are
    the runtime re-running the unit."""
    run: str
    """The runtime's id of the run the unit belongs to (a workflow's id): a duplicate across two
    runs is work submitted twice (cause ``work_resubmitted``), within one a re-execution."""
    id: str
    """The unit's id in its run (an activity's id, a task's id): evidence only."""
    redelivered: bool
    """The broker delivered the unit's message again (Celery's ``delivery_info['redelivered']``)."""


Wait = TypedDict(
    "Wait",
    {"label": str, "setting": str, "setting_s": float, "unit": str, "from": float, "to": float},
    total=False,
)
"""One wait of a runtime after a kill: ``label`` (for a person), ``setting`` (what the user can
change, ``"task_timeout"``, ``"--visibility-timeout"``) and its value in seconds ``setting_s``, the
``unit`` that waited, and ``from``/``to`` in wall-clock seconds (the drill clips them to the case:
``report.waits``)."""

Timeline = Sequence[tuple[float, "Attempt"]]
"""A case's attempts, each with its launch's wall-clock start (``time.time()``), in order."""

Held = tuple[str, dict[str, Any]]
"""What ``explain_hang`` returns: one line for the hang's message (what the runtime still holds:
the open workflow, its pending activities) and its facts as JSON values (a cause reads them)."""


@dataclass(frozen=True)
class Cause:
    """A framework-specific diagnosis a ``causes`` hook returns: a stable ``name`` (lowercase,
    ``_``-separated, documented by the plugin), what was ``observed`` in this case, the ``fix``."""

    name: str
    observed: str
    fix: str


@dataclass(frozen=True)
class ExitAbort:
    """A framework's own abort at interpreter exit, once its work is done: forgiven only when the
    attempt ended by one of ``signals`` (as ``-N`` or a shell's ``128+N``) and its last point
    starts with ``after`` (the integration reached it when the work closed: nothing ran after it
    but the exit), and said in ``note``."""

    after: str
    note: str
    signals: tuple[int, ...] = (6,)  # SIGABRT

    def forgives(self, returncode: int | None, last_point: str) -> bool:
        """Is an exit with ``returncode`` after ``last_point`` this known abort?"""
        ended_by = {-returncode, returncode - 128} if returncode is not None else set()
        return bool(ended_by & set(self.signals)) and last_point.startswith(self.after)


@dataclass(frozen=True)
class Probe:
    """The integration's probe agent for ``killdrill conform``.

    ``module`` runs as ``python -m MODULE --thread T --workdir W`` under the integration and makes
    the steps ``reserve``, ``charge``, ``notify``, each one effect through the fakes
    (``payments.charge`` keyed by the thread and the step: the table's exactly-once column reads
    that charge).  ``committed`` is the point where the framework has recorded ``charge``, ``rerun``
    the point a re-execution of it reaches again, ``next_point`` the point of the step after it;
    ``deliver_barrier`` where the interrupt form's two concurrent resumers are held together
    (consume-once): a point each reaches with the parked state read and the approval not yet
    consumed.  ``distribution``: the framework's distribution, whose version the table shows;
    ``extra``: the extra that installs the framework with the integration's distribution (for
    killdrill's own integrations, killdrill's extra); ``na``: property -> why it does not apply;
    ``options``: extra ``DrillOptions`` fields (``{"model": True}`` runs the scripted model from the
    YAML beside the probe's module); ``order``: its row in the table (lower first); ``quick``: in
    the subset ``killdrill conform --quick`` runs."""

    module: str
    distribution: str
    extra: str = ""
    committed: str = "committed:charge"
    committed_means: str = "the framework recorded the step"
    rerun: str = "before:charge"
    next_point: str = "before:notify"
    deliver_barrier: str = "before:deliver"
    na: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    install_note: str = ""
    order: int = 100
    quick: bool = False


class ServiceProcess(Protocol):
    """A process a :class:`ServiceHost` started."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ServiceHost(Protocol):
    """What the harness lends a service to run its processes contained (they die with the harness,
    however it ends): the drill passes the warden's host."""

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, stdout: str, stderr: str
    ) -> ServiceProcess: ...

    def kill(self, proc: ServiceProcess) -> None: ...


class Service(Protocol):
    """What a :data:`ServiceFactory` returns.  Required: ``env`` and ``close``.  Optional, found by
    name and checked like these (:data:`SERVICE_HOOKS`):

    - ``release(workdir: Path, thread: str) -> None``: the run in ``workdir`` is over; remove what
      it left in the service (a broker's keys, a namespace);
    - ``explain_hang(workdir: Path, thread: str) -> Held | None``: an attempt of that run hung;
      what the runtime still holds, or None when it holds nothing;
    - ``waits(workdir: Path, thread: str, timeline: Timeline) -> list[Wait]``: how long the runtime
      held work a killed attempt left (asked after every case with a kill and a resume, a
      deployment's included);
    - ``restart() -> Restarting``: the service's processes die now as in a crash (SIGKILL: nothing
      flushed, no goodbye to its clients); the :data:`Restarting` it returns starts them again on
      the same state (its database) and address, as a process manager restarts a server.  What
      makes the service a ``restart=NAME:TRIGGER`` target (``NAME``, the integration's name):
      the harness kills at the trigger and starts it again from a thread of its own."""

    def env(self, workdir: Path, thread: str) -> dict[str, str]:
        """Variables added to every launch of the run in ``workdir`` (its first call may start the
        service's processes, through the host)."""
        ...

    def close(self) -> None:
        """The drill is over: stop the service's processes, remove what it made."""
        ...


Restarting = Callable[[], str]
"""What ``restart()`` returns: starts the killed service again and returns once it answers, with
what it started, for a person (``"the Temporal dev server (pid 4242) on 127.0.0.1:7233, its
database kept"``); raises when it cannot (the case says so: its dependency never came back)."""

ServiceFactory = Callable[[Path, ServiceHost, Any], Service]
"""``service(root, host, options)``: ``root``, the drill's folder (the service's files go under
it); ``host``, to start processes; ``options``, the drill's ``DrillOptions`` (its own option
values: ``INTEGRATION.option(options, NAME)``).  Imports its module when called, never at import."""

CausesHook = Callable[["Violation", Sequence["Attempt"]], "Cause | None"]
"""``causes(violation, attempts)``: the violation's facts (its calls, each with the
:class:`RuntimeContext` its unit recorded) and the case's attempts (their points, kills, exits);
a :class:`Cause` when the framework explains it, else None (the drill's own diagnosis stands)."""

WaitsHook = Callable[[Timeline, "Attempt"], Sequence[Mapping[str, Any]]]
"""``waits(timeline, clean)``: the runtime's waits (each a :data:`Wait`) read from a case's
attempts beside a clean run (an ``Attempt`` numbered 0, its points and duration), when no service
can say them."""

RECORD_HOOKS: Mapping[str, tuple[str, ...]] = {
    "activate": (),
    "service": ("root", "host", "options"),
    "causes": ("violation", "attempts"),
    "waits": ("timeline", "clean"),
}
"""The record's hooks and the arguments each is called with."""

SERVICE_HOOKS: Mapping[str, tuple[str, ...]] = {
    "env": ("workdir", "thread"),
    "close": (),
    "release": ("workdir", "thread"),
    "explain_hang": ("workdir", "thread"),
    "waits": ("workdir", "thread", "timeline"),
    "restart": (),
}
"""A service's methods the harness calls (``env`` and ``close`` required) and their arguments."""


class PluginRefused(UsageError):
    """An integration's record or service breaks the contract: one line naming the plugin."""


class HookWarning(PluginWarning):
    """An integration's hook raised while a drill ran: said, and the case goes on without it."""


def _takes(fn: Any, count: int) -> str | None:
    """Why ``fn`` cannot be called with ``count`` positional arguments (None: it can)."""
    if not callable(fn):
        return f"is {type(fn).__name__}, not callable"
    func = getattr(fn, "__func__", fn)  # a bound method's function
    if isinstance(func, FunctionType):  # read from its code: no import of inspect in the agent
        code = func.__code__
        positional = code.co_argcount - (1 if getattr(fn, "__self__", None) is not None else 0)
        optional = len(func.__defaults__ or ())
        keywords = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
        required = [k for k in keywords if k not in (func.__kwdefaults__ or {})]
        if required:
            return f"requires the keyword argument {required[0]!r}"
        if count > positional and not code.co_flags & CO_VARARGS:
            return f"takes {positional} argument(s)"
        if count < positional - optional:
            return f"requires {positional - optional} argument(s)"
        return None
    import inspect

    try:
        inspect.signature(fn).bind(*([None] * count))
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature to read (a builtin): it is called, and said if it fails
        return None
    return None


def _spelled(args: tuple[str, ...]) -> str:
    return f"({', '.join(args)})"


def check_record(record: Any, where: str = "") -> None:
    """Refuse (:class:`PluginRefused`, one line naming the plugin) a record whose hooks cannot be
    called as the contract calls them; ``where``: the module or entry point it came from."""
    said = f" ({where})" if where else ""
    for hook, args in RECORD_HOOKS.items():
        fn = getattr(record, hook, None)
        if fn is None:
            continue
        why = _takes(fn, len(args))
        if why is not None:
            raise PluginRefused(
                f"the integration plugin {record.name!r}{said} was refused: its {hook} hook {why},"
                f" the contract calls {hook}{_spelled(args)}"
            )


def check_service(name: str, service: object) -> None:
    """Refuse a service (what ``name``'s factory returned) missing ``env`` or ``close``, with a hook
    it cannot be called as, or with a method named like a hook but misspelled."""
    for hook, args in SERVICE_HOOKS.items():
        fn = getattr(service, hook, None)
        if fn is None:
            if hook in ("env", "close"):
                raise PluginRefused(
                    f"the integration plugin {name!r} was refused: its service"
                    f" ({type(service).__name__}) has no {hook}{_spelled(args)}"
                )
            continue
        why = _takes(fn, len(args))
        if why is not None:
            raise PluginRefused(
                f"the integration plugin {name!r} was refused: its service's {hook} {why},"
                f" the contract calls {hook}{_spelled(args)}"
            )
    for attr in dir(type(service)):
        if attr.startswith("_") or attr in SERVICE_HOOKS:
            continue
        close = difflib.get_close_matches(attr, list(SERVICE_HOOKS), n=1, cutoff=0.8)
        if close and getattr(service, close[0], None) is None:
            raise PluginRefused(
                f"the integration plugin {name!r} was refused: its service has {attr}(), which the"
                f" harness never calls: did you mean {close[0]}{_spelled(SERVICE_HOOKS[close[0]])}?"
            )
