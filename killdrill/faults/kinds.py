"""The table of fault kinds: what acts out each fault of a schedule, and what one step launches.

A fault kind is one file of ``killdrill/faults/`` declaring a :class:`FaultKind` with
:func:`register` at import: its name (``points.Fault.acts``), how to build the nemesis
(``process.nemesis.Nemesis``) that acts out one schedule item, and, when its attempt is more than
one launch (the zombie and its resumer), what the step launches.  The kill family's kinds
(``kill``, ``hold``, ``pause``, ``drop``, ``reset``) are loaded by name from :data:`BUILTIN_MODULES`;
a kind written ``KIND[=TARGET]:TRIGGER`` from the module its grammar entry names
(``points.GRAMMAR``), so a new kind is its file plus that entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from killdrill.errors import HarnessError
from killdrill.options import DrillOptions
from killdrill.points import GRAMMAR, Fault, Schedule
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.nemesis import Nemesis
from killdrill.records import Attempt
from killdrill.registry import Registry

ENTRY_POINT_GROUP = "killdrill.faults"
BUILTIN_MODULES = (
    "killdrill.faults.kill",
    "killdrill.faults.hold",
    "killdrill.faults.pause",
    "killdrill.faults.connection",
)


class Targets(Protocol):
    """The processes of a case a nemesis may aim at by name (a deployment's: ``Scene.targets``)."""

    def launches(self, name: str) -> list[Running]:
        """The live launches of process ``name`` (``worker``: every replica; ``worker[1]``: one;
        ``driver``: the command after ``--``)."""
        ...

    def ready(self, run: Running) -> bool:
        """Does ``run`` pass its process's readiness probe (``--ready``, or its ``{port}``)?"""
        ...

    def when_ready(self, action: Callable[[], None]) -> None:
        """Call ``action`` each time a launch of the case is noticed ready (its probe passed: as
        its files or its port's listen are written, or on the case's fallback timer)."""
        ...

    def kill(self, run: Running, label: str) -> None:
        """Kill ``run``'s tree as a fault does, recorded at ``label``: a killed service is started
        again after ``--restart-delay``, a killed driver re-run (its resume)."""
        ...

    def outage(self, victims: list[Running], what: str) -> Callable[[], None]:
        """``victims`` (a dependency's launches) are about to be killed: until the returned call
        (the dependency back), the case does not end, and work said done by the launches connected
        to them is not counted (``what`` names the dependency in the notes)."""
        ...

    def down(self, label: str, dark: Callable[[], None]) -> None:
        """The machine the case runs on goes down: every live launch killed at once (recorded at
        ``label``; one already killed keeps its own), none started again until every one is
        reaped; then ``dark()`` (what the fault does while the machine is off) and the boot, as
        the case's start: the services started again, the driver re-run once they are ready."""
        ...


@dataclass
class Scene:
    """What a nemesis may reach of its case besides the supervisor (its ``Stage``): the case's
    workdir, state folder and thread, the drill's options, and the servers of the launches
    running now (``fakes``: the HTTP fakes and the SMTP fake, set by the drill around each batch;
    ``FakesServer.arm`` arms a connection fault for one launch).  ``targets``: a deployment's
    processes by name (None for a single command: its launch is the nemesis's ``spec``).
    ``services``: the integrations' services of the drill as they are now (each with its
    ``plugin`` name; started on first use, so read when a fault acts: a ``restart=`` of one).
    ``extra``: whatever else a drill part hands its own nemeses.  ``lives``: the case-long parts
    of its faults' kinds, by kind (set by :func:`lives`: a power loss's nemesis finds its lossy
    workdir there)."""

    workdir: Path = field(default_factory=Path)
    state: Path = field(default_factory=Path)
    thread: str = ""
    options: DrillOptions | None = None
    fakes: list[Any] = field(default_factory=list)
    targets: Targets | None = None
    services: Callable[[], Sequence[Any]] = lambda: ()
    extra: dict[str, Any] = field(default_factory=dict)
    lives: dict[str, CaseLife] = field(default_factory=dict)


SpecMaker = Callable[[int, Fault | None], LaunchSpec]
"""The launch spec of attempt ``number`` armed with ``fault`` (its env, log files, channel)."""


@dataclass
class Batch:
    """What one step of a case launches at once under one supervisor: its specs (deferred ones
    started by a nemesis), the nemeses acting on them (asked in this order), and how many
    attempt numbers the step used."""

    specs: list[LaunchSpec]
    faults: list[Nemesis] = field(default_factory=list)
    numbers: int = 1


Act = Callable[[Fault, LaunchSpec, Scene], Nemesis]
"""The nemesis acting out ``fault`` on the launch of ``spec`` (the attempt it is scheduled for)."""
Launches = Callable[[Fault, int, Schedule, SpecMaker, Scene], Batch]
"""What the step of attempt ``number`` launches when ``fault`` is its fault (the schedule gives
the next attempts' faults, ``SpecMaker`` their specs)."""


class CaseLife(Protocol):
    """What a kind does over a whole case whose schedule has one of its faults (the power loss:
    the workdir on a lossy file system from the first attempt to the last): ``open`` before the
    first launch, ``attempts`` after each step (its launches reaped: what the kind adds to their
    records), ``close`` at the case's end, however it ends."""

    def open(self) -> None: ...

    def attempts(self, batch: list[Attempt]) -> list[Attempt]: ...

    def close(self) -> None: ...


Life = Callable[[Schedule, Scene], CaseLife]
"""The case-long part of a kind, built once per case whose schedule has one of its faults."""


@dataclass(frozen=True)
class FaultKind:
    """A kind of fault: ``name`` (``points.Fault.acts``), ``act`` (its nemesis for one launch),
    ``launches`` (when its step is more than its one launch; None: the one), ``life`` (what it
    does over the whole case; None: nothing)."""

    name: str
    act: Act
    launches: Launches | None = None
    summary: str = ""
    life: Life | None = None
    check: Callable[[Fault, DrillOptions], None] | None = None
    """Refuse a fault of this kind the drill cannot act out (a target naming nothing), before
    any run: a one-line UsageError (``check_schedule``)."""


_KINDS: Registry[FaultKind] = Registry(
    "fault kind",
    ENTRY_POINT_GROUP,
    builtins=BUILTIN_MODULES,
    module_of=lambda name: GRAMMAR[name].module if name in GRAMMAR else None,  # its grammar entry's
)


def register(kind: FaultKind) -> FaultKind:
    """Declare a fault kind (at its module's import).  The same declaration again is a no-op."""
    return _KINDS.register(kind.name, kind)


def kind_of(fault: Fault) -> FaultKind:
    """The kind that acts out ``fault``; a kind the grammar knows but nothing acts out is a
    harness error (its module did not register it)."""
    kind = _KINDS.get(fault.acts)
    if kind is None:
        raise HarnessError(f"{fault}: no fault kind {fault.acts!r} is registered (killdrill.faults.kinds)")
    return kind


def act(fault: Fault | None, spec: LaunchSpec, scene: Scene) -> list[Nemesis]:
    """The nemeses of one launch armed with ``fault`` (none when it runs free)."""
    return [] if fault is None else [kind_of(fault).act(fault, spec, scene)]


def step(schedule: Schedule, number: int, make: SpecMaker, scene: Scene) -> Batch:
    """What attempt ``number`` of ``schedule`` launches: its one spec with its fault's nemesis,
    or what its fault's kind launches for it (a zombie and its resumer)."""
    fault = schedule.for_attempt(number)
    kind = kind_of(fault) if fault is not None else None
    if fault is not None and kind is not None and kind.launches is not None:
        return kind.launches(fault, number, schedule, make, scene)
    spec = make(number, fault)
    return Batch([spec], act(fault, spec, scene))


def lives(schedule: Schedule, scene: Scene) -> list[CaseLife]:
    """The case-long parts of the kinds of ``schedule``'s faults (one per kind that has one), each
    also in ``scene.lives`` under its kind's name."""
    for fault in schedule:
        kind = kind_of(fault)
        if kind.life is not None and kind.name not in scene.lives:
            scene.lives[kind.name] = kind.life(schedule, scene)
    return list(scene.lives.values())


def check_schedule(schedule: Schedule, options: DrillOptions) -> None:
    """Each fault of ``schedule`` its kind can act out under ``options`` (its ``check``)."""
    for fault in schedule.faults:
        if fault.action is not None:
            kind = kind_of(fault)
            if kind.check is not None:
                kind.check(fault, options)


def kinds() -> dict[str, FaultKind]:
    """Every registered kind, by name."""
    return _KINDS.all()


def nemeses(specs: Sequence[LaunchSpec], scene: Scene) -> list[Nemesis]:
    """The nemeses acting out each spec's own fault (``LaunchSpec.fault``), in order."""
    return [n for spec in specs for n in act(spec.fault, spec, scene)]
