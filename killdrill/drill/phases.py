"""Where a case's wall time went: its phases, measured by the harness, summing to the case's time.

``setup`` (workdir, plan), then per launch ``launch`` (the harness's part: the fakes' servers,
the fork or spawn, the reaping), ``readiness`` (spawn to the agent's first point: interpreter,
imports, the runtime's start), ``run to kill`` (first point to the kill) or ``run`` / ``resume``
(first point to the exit, attempt 1 / later ones), and ``teardown`` of a killed process (the kill
to the end of the whole tree); ``restart`` between launches (the ledger read, the thread's view,
a between-attempts command), ``discovery`` (the drill's clean runs, when this case was the first
to need them), ``clean runs`` (a clean run of the case's own thread), ``verdict`` (the ledger
judged, the diagnosis), ``release`` (the runtime's service let go of the case, the workdir
removed).  A deployment's case is one ``deployment`` phase.

A runtime's waits (from an integration's service's ``waits``: how long the runtime held work
a killed attempt left, and which of the agent's settings sets it) fall inside those phases; the
drill's last lines say the dominant one when it took a large share
(``killdrill.report.waits``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from killdrill.records import EXITED, Attempt, Discovery, TraceEvent

__all__ = ["PhaseClock", "clean_attempt", "clip_waits"]


class PhaseClock:
    """Consecutive spans of one case, each added to a named phase (so they sum to the wall time)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.last = self.start = time.monotonic()
        self.wall_start = time.time()
        self.kills: list[float] = []  # wall-clock ends of killed attempts (a runtime's wait starts there)
        self.timeline: list[tuple[float, Attempt]] = []  # each attempt with its launch's wall-clock start

    def add(self, phase: str, seconds: float) -> None:
        if seconds > 0:
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    def mark(self, phase: str) -> None:
        """The time since the last mark went to ``phase``."""
        now = time.monotonic()
        self.add(phase, now - self.last)
        self.last = now

    def launched(self, batch: Sequence[Attempt]) -> None:
        """The launch just returned ``batch``: its span split into the harness's part and each
        attempt's own (the longest one's, when several ran at once)."""
        now = time.monotonic()
        span = now - self.last
        self.last = now
        began = time.time() - span
        self.timeline.extend((began, a) for a in batch)
        if not batch:
            self.add("launch", span)
            return
        a = max(batch, key=lambda x: x.duration_ms)
        own = min(a.duration_ms / 1000.0, span)
        ready = min(a.trace[0].t_ms / 1000.0, own) if a.trace else own
        killed = a.killed_at is not None and a.signal is not None
        ran = own - ready
        if killed and a.trace:
            last = a.trace[-1].t_ms / 1000.0
            self.add("run to kill", min(max(last - ready, 0.0), ran))
            self.add("teardown", max(ran - max(last - ready, 0.0), 0.0))
        else:
            self.add("run" if a.number == 1 else "resume", ran)
        self.add("readiness", ready)
        self.add("launch", span - own)
        if killed:
            self.kills.append(time.time())  # the launch just returned: at or after the kill

    def deployed(self, attempts: Sequence[Attempt], started: Mapping[int, float]) -> None:
        """A deployment's launches (each with its monotonic start): every process's launches in
        order, one process after another (a killed launch is followed by its own restart), and
        the wall-clock end of each killed one, so the runtime's waits are read as a single
        command's are."""
        shift = time.time() - time.monotonic()
        by_process: dict[str, list[tuple[float, Attempt]]] = {}
        for a in attempts:
            if a.number in started:
                by_process.setdefault(a.process or "", []).append((started[a.number] + shift, a))
        for launches in by_process.values():
            launches.sort(key=lambda pair: pair[0])
            self.timeline.extend(launches)
            self.kills += [at + a.duration_ms / 1000.0 for at, a in launches if a.killed_at is not None]
        self.kills.sort()

    def result(self) -> dict[str, float]:
        self.mark("release")
        return {k: round(v, 4) for k, v in self.phases.items()}

    def wall(self) -> float:
        return time.monotonic() - self.start


def clip_waits(
    waits: Iterable[Mapping[str, Any]], kills: Sequence[float], end: float
) -> list[dict[str, Any]]:
    """The runtime's waits as this case lived them: each from the first kill that left the work
    (``from`` clipped to it) to when the runtime handed the work on (``to``), in seconds."""
    out: list[dict[str, Any]] = []
    if not kills:
        return out
    for w in waits:
        start = max(float(w.get("from") or kills[0]), kills[0])
        seconds = min(float(w["to"]), end) - start
        if seconds > 0:
            out.append(
                {k: v for k, v in w.items() if k not in ("from", "to")} | {"seconds": round(seconds, 3)}
            )
    return out


def clean_attempt(discovery: Discovery) -> Attempt:
    """The drill's first clean run as an attempt (number 0): its points and its duration, the
    yardstick an integration reads a resume's delay against."""
    trace = tuple(TraceEvent(e.point, e.occurrence, e.t_ms, 0) for e in discovery.catalogue)
    return Attempt(0, None, EXITED, 0, discovery.duration_ms, trace)
