"""A deployment's processes: the ``--serve`` services (each replica its own process), the driver,
their ports and readiness, and the placeholders filled in every command, ``--env`` value and
``--ready`` probe: ``{thread}``, ``{workdir}``, ``{port}``, ``{port:NAME}``, ``{replica}`` (and
``{proxy:NAME}``, a ``--proxy``'s port, filled per launch by ``killdrill.faults.proxied``).

Ports are picked once per case (free when picked, held until its end: ``process.ports``) and
kept across restarts.  ``{port}`` in a
service's own command and probe is that process's port (each replica its own); elsewhere it is
the first service's.  ``{port:NAME}`` is service NAME's (``{port:NAME[i]}`` replica i's).

:func:`check_placeholders` checks every placeholder of a drill once, with or without services:
``{port:NAME}`` naming no service, a replica index out of range, ``{port}``/``{replica}`` with no
service to give them are one-line UsageErrors naming the option as the caller spelled it.

A fault's ``NAME:`` aims at processes by these names: :func:`check_faults` (a name of the
deployment), :func:`aims_at` (a service's every replica), :func:`service_of`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from killdrill import envvars
from killdrill.drill.env import resolve_command
from killdrill.errors import HarnessError, UsageError
from killdrill.options import OPTIONS, DrillOptions, Rule
from killdrill.points import Fault, Schedule
from killdrill.process.attempts import Running
from killdrill.process.readiness import check, free_port

DRIVER = "driver"
"""The process name of the command after ``--`` (``driver:POINT`` aims at it)."""

_PLACEHOLDER = re.compile(r"\{(thread|workdir|replica|port(?::([^{}]*))?)\}")
_PROXY = re.compile(r"\{proxy:([^{}]*)\}")  # filled per launch (killdrill.faults.proxied)
_OWN_PORT = re.compile(r"\{port(?::([^{}]+))?\}")
_PORT_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)(?:\[(\d+)\])?$")

_IN = {
    "serve": Rule("{serve} {name}: {why}"),
    "ready": Rule("{ready} {name}: {why}"),
    "env": Rule("{env} {name}: {why}"),
    "between": Rule("{between}: {why}"),
    "resume_with": Rule("{resume_with}: {why}"),
    "proxy": Rule("{proxy} {name}: {why}"),
    "after": Rule("{after} {name}: {why}"),
}
NO_SERVICE = {
    "ready": Rule("{ready} {name}: no {serve} service of that name (services: {known})"),
    "replicas": Rule("{replicas} {name}: no {serve} service of that name (services: {known})"),
    "after": Rule("{after} {name}: no {serve} service of that name (services: {known})"),
}
SERVE_ALONE = Rule("{serve} does not go with {what}: a deployment's processes are spawned and SIGKILLed")
SERVE_DRIVER = Rule(
    f"{{serve}} {DRIVER}=...: {DRIVER!r} names the command after --; name the service otherwise"
)
SERVE_COMMAND = Rule("{serve} {name}: {why}")
SERVE_AS = Rule("{serve}")  # the option as the caller spells it, for a message of our own


def _placeholder_mistake(text: str, options: DrillOptions, flag: str = "--serve") -> str | None:
    """Why a placeholder in ``text`` cannot be filled (None: every one can); ``flag``: ``--serve``
    as the caller spells it."""
    serve = options.serve
    for m in _PROXY.finditer(text):
        if m.group(1).strip() not in options.proxy:
            known = ", ".join(options.proxy) or "none"
            return f"{m.group(0)}: no --proxy named {m.group(1).strip()!r} (proxies: {known})"
    for m in _PLACEHOLDER.finditer(text):
        word, name = m.group(1), m.group(2)
        if word == "replica" and not serve:
            return f"{{replica}} is a service's copy number: it needs {flag}"
        if word == "port" and not serve:
            return f"{{port}} is the first service's port: it needs a {flag} service"
        if name is None:
            continue
        parsed = _PORT_NAME.match(name.strip())
        if parsed is None:
            return f"{m.group(0)}: expected {{port:NAME}} or {{port:NAME[i]}} (i = 0, 1, ...)"
        target, index = parsed.group(1), parsed.group(2)
        if target not in serve:
            known = ", ".join(serve) or "none"
            return f"{m.group(0)}: no {flag} service named {target!r} (services: {known})"
        copies = options.replicas.get(target, 1)
        if index is not None and (len(index) > 4 or int(index) >= copies):
            last = f"{{port:{target}[{copies - 1}]}}"
            runs = f"{copies} cop{'y' if copies == 1 else 'ies'}"
            return f"{m.group(0)}: service {target} runs {runs} (the last is {last})"
    return None


def check_placeholders(options: DrillOptions, command: Sequence[str]) -> None:
    """Every placeholder of the drill's commands, ``--env`` values and probes can be filled: a
    mistake is a one-line UsageError naming the option as the caller spelled it (never a port
    picked for a name no service has, never a placeholder left raw)."""
    spelled = options.spelled
    flag = str(SERVE_AS.error(options, spelled, OPTIONS))
    for arg in command:
        if why := _placeholder_mistake(arg, options, flag):
            raise UsageError(f"the command: {why}")
    for field in ("between", "resume_with"):
        for arg in getattr(options, field) or ():
            if why := _placeholder_mistake(arg, options, flag):
                raise _IN[field].error(options, spelled, OPTIONS, why=why)
    for name, value in options.env.items():
        if why := _placeholder_mistake(value, options, flag):
            raise _IN["env"].error(options, spelled, OPTIONS, name=name, why=why)
    for field, texts in (("serve", options.serve), ("ready", options.ready), ("proxy", options.proxy)):
        for name, given in texts.items():
            for arg in [given] if isinstance(given, str) else given:
                if why := _placeholder_mistake(arg, options, flag):
                    raise _IN[field].error(options, spelled, OPTIONS, name=name, why=why)


@dataclass(frozen=True)
class Process:
    """One process of a case as started (and restarted): its name, command, env and probe."""

    name: str  # "api", "worker[1]", "driver"
    service: str | None  # the --serve name; None for the driver
    replica: int
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the user's --env, filled for this process, and its identity
    ready: str | None  # a filled probe, or None: ready once started
    after: tuple[str, ...] = ()  # the services it starts after, once each passed its probe (--after)


class Topology:
    """The services of a drill's options, checked once (a one-line UsageError per mistake)."""

    def __init__(self, options: DrillOptions, driver: Sequence[str]) -> None:
        self.options = options
        self.driver = tuple(driver)
        serve, spelled = options.serve, options.spelled
        for field, names in (
            ("ready", options.ready),
            ("replicas", options.replicas),
            ("after", options.after),
        ):
            for name in names:
                if name not in serve:
                    raise NO_SERVICE[field].error(
                        options, spelled, OPTIONS, name=name, known=", ".join(serve)
                    )
        if DRIVER in serve:
            raise SERVE_DRIVER.error(options, spelled, OPTIONS)
        _check_after(options)
        check_placeholders(options, driver)
        for name, spec in options.ready.items():
            # its placeholders stand for what a case fills in (a port, a path): checked filled
            sample = _Filler("t", "/w", {}, own=name, replica=0, service=name, default=name, pick=lambda: 1)
            why = check(sample.fill(spec))
            if why:
                why = why.replace(sample.fill(spec), spec)
                raise _IN["ready"].error(options, spelled, OPTIONS, name=name, why=why)
        alone = [
            flag
            for flag, on in (
                ("--resumers", options.resumers > 1),
                ("--resume-with", bool(options.resume_with)),
                ("--between", bool(options.between)),
                ("--signal TERM", options.signal == "TERM"),
            )
            if on
        ]
        if alone:
            raise SERVE_ALONE.error(options, spelled, OPTIONS, what=alone[0])
        self.services: dict[str, list[str]] = {}
        for name, argv in serve.items():
            try:
                self.services[name] = resolve_command(argv)
            except HarnessError as exc:  # a mistyped NAME= reads as a command: say which was meant
                named = any("=" in a for a in argv[:2])
                hint = " (a service is NAME=CMD, NAME ASCII letters, digits, _ and -)" if named else ""
                shown = " ".join(argv) if named else name
                raise SERVE_COMMAND.error(options, spelled, OPTIONS, name=shown, why=f"{exc}{hint}") from None

    def _replica_names(self, name: str) -> list[str]:
        n = self.options.replicas.get(name, 1)
        return [name] if n == 1 else [f"{name}[{i}]" for i in range(n)]

    def processes(
        self,
        thread: str,
        workdir: str,
        ports: dict[str, int] | None = None,
        pick: Callable[[], int] = free_port,
    ) -> list[Process]:
        """The case's processes, services first, the driver last, every placeholder filled (the
        ports picked now by ``pick``, for the whole case, into ``ports`` when given)."""
        ports = {} if ports is None else ports
        first = next(iter(self.services), None)
        out: list[Process] = []
        for name, argv in self.services.items():
            replicas = self.options.replicas.get(name, 1)
            for r, pname in enumerate(self._replica_names(name)):
                own = pname if replicas > 1 and r > 0 else name
                filler = _Filler(
                    thread, workdir, ports, own=own, replica=r, service=name, default=own, pick=pick
                )
                probe = self.options.ready.get(name)
                if probe is None and any(
                    m.group(1) in (None, name, own) for a in argv for m in _OWN_PORT.finditer(a)
                ):
                    probe = "tcp:{port}"
                out.append(
                    Process(
                        name=pname,
                        service=name,
                        replica=r,
                        argv=tuple(filler.fill(a) for a in argv),
                        env=self._env(filler, pname, r),
                        ready=filler.fill(probe) if probe is not None else None,
                        after=tuple(self.options.after.get(name, ())),
                    )
                )
        filler = _Filler(thread, workdir, ports, own=None, replica=0, service=None, default=first, pick=pick)
        out.append(
            Process(
                DRIVER,
                None,
                0,
                tuple(filler.fill(a) for a in self.driver),
                self._env(filler, DRIVER, 0),
                None,
            )
        )
        return out

    def upstreams(self, thread: str, workdir: str, ports: dict[str, int]) -> dict[str, str]:
        """The ``--proxy`` targets with ``{port:NAME}`` filled from the case's ``ports``."""
        first = next(iter(self.services), None)
        filler = _Filler(thread, workdir, ports, own=None, replica=0, service=None, default=first)
        return {name: filler.fill(text) for name, text in self.options.proxy.items()}

    def _env(self, filler: _Filler, name: str, replica: int) -> dict[str, str]:
        env = {k: filler.fill(v) for k, v in self.options.env.items()}
        env.update({envvars.PROCESS: name, envvars.REPLICA: str(replica)})
        return env


def _check_after(options: DrillOptions) -> None:
    """``--after``: every dependency a service, none in a cycle (a service that would never
    start), each a one-line UsageError before anything starts."""
    serve, spelled, after = options.serve, options.spelled, options.after
    flag = str(SERVE_AS.error(options, spelled, OPTIONS))
    for name, deps in after.items():
        for dep in deps:
            if dep not in serve:
                why = f"no {flag} service {dep!r} to start after (services: {', '.join(serve)})"
                raise _IN["after"].error(options, spelled, OPTIONS, name=f"{name}={','.join(deps)}", why=why)
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            loop = " -> ".join((*path[path.index(name) :], name))
            why = f"a cycle ({loop}): none of these services would ever start"
            raise _IN["after"].error(options, spelled, OPTIONS, name=name, why=why)
        if name in done:
            return
        for dep in after.get(name, ()):
            visit(dep, (*path, name))
        done.add(name)

    for name in after:
        visit(name, ())


class _Filler:
    """Fills one process's placeholders; ``ports`` is the case's (picked on first use)."""

    def __init__(
        self,
        thread: str,
        workdir: str,
        ports: dict[str, int],
        *,
        own: str | None,
        replica: int,
        service: str | None,
        default: str | None,
        pick: Callable[[], int] = free_port,
    ) -> None:
        self.values = {"thread": thread, "workdir": workdir, "replica": str(replica)}
        self.ports = ports
        self.own, self.service, self.default = own, service, default
        self.pick = pick

    def port(self, name: str | None) -> str:
        name = None if name is None else name.strip()
        key = self.default if name is None else (self.own if name == self.service else name)
        if key is None:  # check_placeholders refused it before any case
            raise UsageError("{port} in the driver's command needs a --serve service (or use {port:NAME})")
        if key.endswith("[0]"):
            key = key[:-3]
        if key not in self.ports:
            self.ports[key] = self.pick()
        return str(self.ports[key])

    def fill(self, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            word = m.group(1)
            return self.port(m.group(2)) if word.startswith("port") else self.values[word]

        return _PLACEHOLDER.sub(one, text)


def check_faults(schedule: Schedule, names: Sequence[str]) -> None:
    """A deployment takes kills at points and at offsets, and the kinds of ``points.GRAMMAR``;
    ``NAME:`` must name one of its processes."""
    for fault in schedule.faults:
        if not fault.is_kill and fault.action is None:
            raise UsageError(
                f"{fault}: a deployment's schedule takes kills (a point, +Xms, offset:), not holds,"
                " pauses or connection faults"
            )
        if (
            fault.process is not None
            and fault.process not in names
            and not any(n.startswith(fault.process + "[") for n in names)
        ):
            raise UsageError(f"{fault}: no process {fault.process!r} (processes: {', '.join(names)})")


def aims_at(fault: Fault, name: str) -> bool:
    """Is ``fault`` for process ``name``?  ``worker`` covers every replica ``worker[i]``; an
    offset with no name is the driver's."""
    if fault.process is None:
        return fault.point is not None or name == DRIVER
    return name == fault.process or name.startswith(fault.process + "[")


def from_case_start(fault: Fault, run: Running, first: float) -> Fault:
    """A timed ``fault`` (``offset:Xms``) for ``run``, which counts from its own start: when
    ``first`` (monotonic) is earlier, the offset counts from there (the driver's first run: from
    the case's first start, as the catalogue's times do, which ``start+F%`` resolves against)."""
    if fault.offset_ms is None or first >= run.started:
        return fault
    return replace(fault, offset_ms=max(0.0, fault.offset_ms - (run.started - first) * 1000.0))


def service_of(name: str) -> str:
    """The service a process is a replica of (``worker[1]`` -> ``worker``)."""
    return re.sub(r"\[\d+\]$", "", name)
