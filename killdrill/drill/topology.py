"""A deployment's processes: the ``--serve`` services (each replica its own process), the driver,
their ports and readiness, and the placeholders filled in every command, ``--env`` value and
``--ready`` probe: ``{thread}``, ``{workdir}``, ``{port}``, ``{port:NAME}``, ``{replica}``.

Ports are picked once per case (free when picked) and kept across restarts.  ``{port}`` in a
service's own command and probe is that process's port (each replica its own); elsewhere it is
the first service's.  ``{port:NAME}`` is service NAME's (``{port:NAME[i]}`` replica i's; any
other NAME gets a free port of its own, the same everywhere in the case)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from killdrill.drill.env import resolve_command
from killdrill.errors import UsageError
from killdrill.options import DrillOptions
from killdrill.process.readiness import check, free_port

DRIVER = "driver"
"""The process name of the command after ``--`` (``driver:POINT`` aims at it)."""

_PLACEHOLDER = re.compile(r"\{(thread|workdir|replica|port(?::([^{}]+))?)\}")
_OWN_PORT = re.compile(r"\{port(?::([^{}]+))?\}")


@dataclass(frozen=True)
class Process:
    """One process of a case as started (and restarted): its name, command, env and probe."""

    name: str  # "api", "worker[1]", "driver"
    service: str | None  # the --serve name; None for the driver
    replica: int
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the user's --env, filled for this process, and its identity
    ready: str | None  # a filled probe, or None: ready once started


class Topology:
    """The services of a drill's options, checked once (a one-line UsageError per mistake)."""

    def __init__(self, options: DrillOptions, driver: Sequence[str]) -> None:
        self.options = options
        self.driver = tuple(driver)
        serve = options.serve
        for what, names in (("--ready", options.ready), ("--replicas", options.replicas)):
            for name in names:
                if name not in serve:
                    known = ", ".join(serve) or "none"
                    raise UsageError(f"{what} {name}: no --serve service of that name (services: {known})")
        for name, spec in options.ready.items():
            why = check(spec)
            if why:
                raise UsageError(f"--ready {name}: {why}")
        if DRIVER in serve:
            raise UsageError(
                f"--serve {DRIVER}=...: {DRIVER!r} names the command after --; name the service otherwise"
            )
        alone = [
            flag
            for flag, on in (
                ("--resumers", options.resumers > 1),
                ("--resume-with", bool(options.resume_with)),
                ("--between", bool(options.between)),
                ("--launcher fork", options.launcher == "fork"),
                ("--signal TERM", options.signal == "TERM"),
            )
            if on
        ]
        if alone:
            raise UsageError(
                f"--serve does not go with {alone[0]}: a deployment's processes are spawned and SIGKILLed"
            )
        self.services = {name: resolve_command(argv) for name, argv in serve.items()}

    def _replica_names(self, name: str) -> list[str]:
        n = self.options.replicas.get(name, 1)
        return [name] if n == 1 else [f"{name}[{i}]" for i in range(n)]

    def processes(self, thread: str, workdir: str) -> list[Process]:
        """The case's processes, services first, the driver last, every placeholder filled (the
        ports picked now, for the whole case)."""
        ports: dict[str, int] = {}
        first = next(iter(self.services), None)
        out: list[Process] = []
        for name, argv in self.services.items():
            replicas = self.options.replicas.get(name, 1)
            for r, pname in enumerate(self._replica_names(name)):
                own = pname if replicas > 1 and r > 0 else name
                filler = _Filler(thread, workdir, ports, own=own, replica=r, service=name, default=own)
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
                    )
                )
        filler = _Filler(thread, workdir, ports, own=None, replica=0, service=None, default=first)
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

    def _env(self, filler: _Filler, name: str, replica: int) -> dict[str, str]:
        env = {k: filler.fill(v) for k, v in self.options.env.items()}
        env.update(KILLDRILL_PROCESS=name, KILLDRILL_REPLICA=str(replica))
        return env


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
    ) -> None:
        self.values = {"thread": thread, "workdir": workdir, "replica": str(replica)}
        self.ports = ports
        self.own, self.service, self.default = own, service, default

    def port(self, name: str | None) -> str:
        key = self.default if name is None else (self.own if name == self.service else name)
        if key is None:
            raise UsageError("{port} in the driver's command needs a --serve service (or use {port:NAME})")
        if key.endswith("[0]"):
            key = key[:-3]
        if key not in self.ports:
            self.ports[key] = free_port()
        return str(self.ports[key])

    def fill(self, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            word = m.group(1)
            return self.port(m.group(2)) if word.startswith("port") else self.values[word]

        return _PLACEHOLDER.sub(one, text)
