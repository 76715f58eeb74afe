"""A deployment's services watched as they write: a launch's readiness noticed when it happens,
not on the next tick of a timer.

Each service launch has its probe (``process.readiness.Probe``; none: ready at its start).  Where
files can be watched (``process.filewatch``: Linux inotify) the launch's stdout and stderr are,
and, probed on a port, its listen mark (``envvars.LISTEN_MARK``: the bootstrap appends to it at
each ``listen()`` of the service's Python processes): a write tries the probe at once, so a
``log:`` line is seen as it is written and a port as it opens (or as the server says it does);
an ``http://`` probe's request in flight is watched too, its answer read as it comes.
The deployment's fallback timer tries every probe not passed too (``tick``): a service that writes
nothing and is not Python, a Python run without the bootstrap, or no inotify (macOS) is noticed
as before, on the timer alone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from killdrill import envvars
from killdrill.drill.env import bootstrap_dir, last_line
from killdrill.integrations import dones, unfinished, without_work
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.filewatch import FileWatch
from killdrill.process.nemesis import Stage
from killdrill.process.readiness import Appended, Probe, busy_listening, probed_port
from killdrill.process.reaping import tail
from killdrill.records import Attempt, AttemptOutcome

ELSEWHERE_S = 1.0  # how long a service may listen, idle, only on other ports than its probe's
IDLE_CPU_S = 0.05  # CPU seconds per second under which a service's processes are idle
LOOK_EVERY_S = 0.25  # how often a service not ready yet is looked at for listens elsewhere


class ServiceWatch:
    """The readiness of a deployment's service launches, first starts and restarts alike.
    ``on_ready``: what to call with each launch noticed ready, in order (the driver's start once
    every first start is; a restart's note)."""

    def __init__(self) -> None:
        self.files = FileWatch.open()
        self.stage: Stage | None = None
        # id(spec) -> a live launch not noticed ready yet, its probe (None: none) and its files' action
        self.pending: dict[int, tuple[Running, Probe | None, Callable[[], None]]] = {}
        self.noticed: dict[int, float] = {}  # id(spec) -> when it was noticed ready (monotonic)
        self.on_ready: list[Callable[[Running], None]] = []

    def prepare(self, spec: LaunchSpec, probe: str | None) -> None:
        """Before a service's launch: its log files made, so they are watched from its first
        write; probed on a port, its listen mark too, named in its environment with the
        bootstrap on its ``PYTHONPATH``."""
        if probe is None or self.files is None:
            return
        paths = [spec.stdout_path, spec.stderr_path]
        if probed_port(probe) is not None:
            mark = listen_mark(spec)
            paths.append(mark)
            python_path = [p for p in spec.env.get("PYTHONPATH", "").split(os.pathsep) if p]
            if bootstrap_dir() not in python_path:
                python_path.insert(0, bootstrap_dir())
            spec.env = {**spec.env, envvars.LISTEN_MARK: mark, "PYTHONPATH": os.pathsep.join(python_path)}
        for path in paths:
            with contextlib.suppress(OSError):
                open(path, "ab").close()  # the launch truncates it: the same file, still watched

    def setup(self, stage: Stage) -> None:
        self.stage = stage
        if self.files is not None:
            stage.watch(self.files.fileno(), self.files.dispatch)

    def start(self, run: Running, probe: str | None) -> None:
        """A service's launch started: noticed ready when its probe passes (tried at once, once the
        launch is among the stage's, then at each write to its files and each ``tick``)."""
        assert self.stage is not None

        def written() -> None:
            self.attempt(run)

        stage = self.stage

        def knock(fd: int) -> None:  # an http request in flight: its answer read as it comes
            stage.watch(fd, written)

        checks = Probe(probe, *_logs(run), watch=knock, unwatch=stage.unwatch) if probe else None
        self.pending[id(run.spec)] = (run, checks, written)
        if self.files is not None and probe is not None:
            for path in _files(run):
                self.files.add(path, written)
        self.stage.at(0.0, written)

    def attempt(self, run: Running) -> bool:
        """Is ``run`` ready?  Tries its probe if it was not noticed yet (and says so to
        ``on_ready`` when it passes now)."""
        key = id(run.spec)
        if key in self.noticed:
            return True
        entry = self.pending.get(key)
        if entry is None or not run.alive or (entry[1] is not None and not entry[1]()):
            return False
        self.noticed[key] = time.monotonic()
        self.gone(run)
        for action in list(self.on_ready):
            action(run)
        return True

    def tick(self) -> None:
        """The fallback: every probe not passed yet, tried now."""
        for run, _, _ in list(self.pending.values()):
            self.attempt(run)

    def gone(self, run: Running) -> None:
        """``run`` is no longer waited for (ready, or ended): its files no longer watched."""
        entry = self.pending.pop(id(run.spec), None)
        if entry is not None and entry[1] is not None:
            entry[1].close()  # an http request in flight: unwatched, its socket closed
            if self.files is not None:
                for path in _files(run):
                    self.files.remove(path, entry[2])

    def follow(self, path: str, action: Callable[[], None]) -> None:
        """Call ``action`` at each write to ``path`` (nothing without a watch: the caller's timer)."""
        if self.files is not None:
            self.files.add(path, action)

    def close(self) -> None:
        for _, probe, _ in self.pending.values():
            if probe is not None:
                probe.close()
        if self.files is not None:
            if self.stage is not None:
                self.stage.unwatch(self.files.fileno())
            self.files.close()


class HeldWork:
    """The work the services say they hold (``integrations._work``'s lines on their stderr), read
    as their stderr grows: whole lines, each file from where its last read stopped, and followed
    (``on_line``: called at each write to one, once it was read)."""

    def __init__(self, watch: ServiceWatch, on_line: Callable[[], None]) -> None:
        self.watch = watch
        self.on_line = on_line
        self.logs: dict[int, tuple[Appended, str]] = {}  # id(spec) -> its stderr, a line begun
        self.texts: dict[int, str] = {}  # id(spec) -> its stderr's whole lines so far

    def read(self, services: list[Running], doubted: dict[int, str] | None = None) -> bool:
        """Read what the services' stderr gained: did a work line come?  ``doubted``: id(spec) ->
        the dependency it is cut off from (killed, not back yet): work it says done now is not
        counted (an ack written to a broker that is gone never reached it; the work comes back)."""
        came = False
        for r in services:
            key = id(r.spec)
            if key not in self.logs:
                self.logs[key] = (Appended(r.spec.stderr_path), "")
                self.watch.follow(r.spec.stderr_path, self.on_line)
            log, begun = self.logs[key]
            lines, newline, begun = (begun + log.text()).rpartition("\n")
            self.logs[key] = (log, begun)
            if newline:
                came = came or without_work(lines) != lines
                if doubted and key in doubted:
                    lines, runs = dones(lines + newline)
                    newline = ""
                    for run in runs:
                        r.notes.append(
                            f"said work {run} done while {doubted[key]} was down: not counted (what"
                            " it told a dependency that is gone may never have reached it)"
                        )
                self.texts[key] = self.texts.get(key, "") + lines + newline
        return came

    def held(self, services: list[Running]) -> list[tuple[Running, list[str]]]:
        """Each live service's unfinished work (done in any of them counts), as read so far."""
        everywhere = "".join(self.texts.get(id(r.spec), "") for r in services)
        out: list[tuple[Running, list[str]]] = []
        for r in services:
            left = unfinished(self.texts.get(id(r.spec), ""), everywhere) if r.alive else {}
            works = [f"{name or 'work'} {run}" for run, name in left.items()]
            if works:
                out.append((r, works))
        return out


def listen_mark(spec: LaunchSpec) -> str:
    """The file a launch's listens are marked in: ``attempt-N.listen`` beside its logs."""
    return os.path.splitext(spec.stdout_path)[0] + ".listen"


def _logs(run: Running) -> tuple[str, str]:
    return run.spec.stdout_path, run.spec.stderr_path


def _files(run: Running) -> list[str]:
    mark = [listen_mark(run.spec)] if envvars.LISTEN_MARK in run.spec.env else []
    return [*_logs(run), *mark]


class Elsewhere:
    """The services waited for that listen, but not on the port their probe knocks on: each
    looked at ``LOOK_EVERY_S`` after its launch and as often again, not on every tick (a look walks
    its process tree and reads the machine's TCP table: ~10 ms of the harness's CPU with a few
    hundred connections in TIME_WAIT, a tenth of a forked case's time at the 50 ms tick)."""

    def __init__(self) -> None:
        self.since: dict[int, tuple[float, float]] = {}  # id(spec) -> first seen so, its CPU then
        self.looked: dict[int, float] = {}  # id(spec) -> when last looked at

    def why(self, run: Running, probe: str | None) -> str | None:
        """What is wrong with ``run`` (:func:`listens_elsewhere`), or None while nothing is or it
        was looked at less than ``LOOK_EVERY_S`` ago."""
        now = time.monotonic()
        if now - self.looked.get(id(run.spec), run.started) < LOOK_EVERY_S:
            return None
        self.looked[id(run.spec)] = now
        return listens_elsewhere(run, probe, self.since)


def listens_elsewhere(run: Running, probe: str | None, since: dict[int, tuple[float, float]]) -> str | None:
    """What is wrong with a service up and listening, but not on the port its probe knocks on, for
    ``ELSEWHERE_S`` while idle (a server may open another port first: RabbitMQ its cluster port
    seconds before AMQP's, busy starting all along; ``since``: id(spec) -> when first seen so and
    the CPU seconds its processes had used then); None while nothing is."""
    port = probed_port(probe) if probe is not None else None
    ports, cpu = busy_listening(run.popen.pid) if port is not None and run.alive else (set(), 0.0)
    if not ports or port in ports:
        since.pop(id(run.spec), None)
        return None
    now = time.monotonic()
    first, cpu_then = since.setdefault(id(run.spec), (now, cpu))
    if now - first < ELSEWHERE_S:
        return None
    if cpu - cpu_then > IDLE_CPU_S * (now - first):
        since[id(run.spec)] = (now, cpu)  # still working: look again a while later
        return None
    where = ", ".join(map(str, sorted(ports)))
    return (
        f"listens on port {where}, not on the probed port {port} ({probe}):"
        " start it on {port} (the case's port for it) or probe the port it listens on"
    )


def last_own_line(run: Running) -> str:
    """The last line of ``run``'s stderr, its own (not the harness's work lines)."""
    return last_line(without_work(tail(run.spec.stderr_path)))


def ended(rc: int | None) -> str:
    """How a launch that exited with ``rc`` ended, in words (``exited 1``, ``killed by SIGKILL``)."""
    return Attempt(0, None, AttemptOutcome.EXITED, rc, 0.0).ended
