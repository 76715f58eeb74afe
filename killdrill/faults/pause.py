"""The zombie worker: ``pause:POINT[#N][@OTHER[#M]]``.

**The zombie.**  A worker stalls (a GC pause, a partition, a long call), its lease expires, a
second worker resumes the thread, then the first wakes up and carries on.  ``pause:POINT`` in a
schedule drills it on real processes:

1. attempt N reaches POINT (``#N`` counts as everywhere): its whole process tree is stopped
   (SIGSTOP, the keeper spared) while the agent is still parked at the boundary, then the
   boundary is answered: the answer waits in the socket until the process runs again;
2. attempt N+1, the resumer, starts at once with the same thread and workdir (the next item
   of the schedule is its kill);
3. the paused attempt is continued (SIGCONT) when the resumer exits, however it ends; with
   ``pause:POINT@OTHER`` it is continued when the resumer reaches OTHER instead, and the
   resumer is held at OTHER until the woken attempt reaches its next boundary or exits (a
   deterministic hand-over: first the resumer up to OTHER, then the zombie's next step);
4. both run to their end, or the per-attempt timeout kills them (it counts the pause); the
   verdict judges every call of both, the ledger records which attempt and pid made it.

The resumer's own point of the schedule takes precedence over OTHER at the same boundary.  A
resumer cannot be paused itself (``pause:a,pause:b``): a usage error.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

from killdrill.faults.kinds import Batch, FaultKind, Scene, SpecMaker, act, register
from killdrill.points import Fault, Schedule, occurrence_label
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.process.containment import signal_all, subtree, until_stopped
from killdrill.process.control import Connection
from killdrill.process.nemesis import AtPoints, Nemesis, fault_armed_at
from killdrill.records import TraceEvent


def _tree(run: Running) -> list[int]:
    """The attempt's processes: its agent and every descendant of its keeper (not the keeper)."""
    pids = [int(run.popen.pid)]
    pids += [pid for pid in subtree(run.tree_root) if pid not in pids]
    return pids


def stop_tree(run: Running, limit_s: float = 0.5) -> list[int]:
    """SIGSTOP the attempt's tree, rescanning until no new process appears (one mid-fork)."""
    seen: list[int] = []
    deadline = time.monotonic() + limit_s
    while True:
        new = [pid for pid in _tree(run) if pid not in seen]
        if not new:
            return seen
        signal_all(new, signal.SIGSTOP)
        seen += new
        until_stopped(new, deadline - time.monotonic())
        if time.monotonic() >= deadline:
            return seen


@dataclass(eq=False)
class Pause(Nemesis):
    """The zombie of one step: pause, start the resumer, continue, hand over."""

    kill: Fault
    resumer: LaunchSpec
    zombie: Running | None = None
    resumer_run: Running | None = None
    stopped: list[int] = field(default_factory=list)
    paused_at: float = 0.0
    state: str = "armed"  # armed -> paused -> continued
    held: tuple[Running, Connection] | None = None

    def at_points(self, spec: LaunchSpec) -> AtPoints | None:
        return AtPoints.WAIT  # the zombie's and the resumer's: answered late (held, handed over)

    def on_boundary(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        if (
            self.state == "armed"
            and run.spec is not self.resumer
            and self.kill.at(event.point, event.occurrence)
        ):
            self._pause(run, event, conn)
            return True
        if self.state == "paused" and (self.zombie is None or not self.zombie.alive):
            self.state = "continued"  # killed while paused (its timeout): nothing to wake, no one to hold for
        if run is self.resumer_run and self.state == "paused" and self.kill.until == event.label:
            if fault_armed_at(run, event):
                return False  # the resumer's scheduled kill comes first
            self.held = (run, conn)
            run.notes.append(f"held at {event.label} while the paused attempt {self._number} ran on")
            self._continue(f"attempt {run.spec.number} reached {event.label}")
            return True
        if run is self.zombie and self.state == "continued":
            self._let_resumer_go()
        return False

    def on_exit(self, run: Running) -> None:
        if run is self.resumer_run and self.state == "paused":
            self._continue(f"attempt {run.spec.number} exited")
        elif run is self.zombie:
            self.state = "continued"
            self._let_resumer_go()

    @property
    def _label(self) -> str:
        return occurrence_label(self.kill.point or "", self.kill.occurrence)

    @property
    def _number(self) -> int:
        return self.zombie.spec.number if self.zombie is not None else 0

    def _pause(self, run: Running, event: TraceEvent, conn: Connection) -> None:
        stage = self.bound()
        run.fired = True
        self.zombie, self.state = run, "paused"
        self.stopped = stop_tree(run)
        self.paused_at = time.monotonic()
        stage.release(run, conn)  # read once it runs again
        self.resumer_run = stage.start(self.resumer)

    def _continue(self, why: str) -> None:
        assert self.zombie is not None
        self.state = "continued"
        if not self.zombie.alive:
            return
        pids = self.stopped + [pid for pid in _tree(self.zombie) if pid not in self.stopped]
        signal_all(pids, signal.SIGCONT)
        paused_ms = (time.monotonic() - self.paused_at) * 1000.0
        self.zombie.notes.append(
            f"paused (SIGSTOP of its process tree) at {self._label}"
            f" for {paused_ms:.0f}ms while attempt {self.resumer.number} resumed the thread;"
            f" continued when {why}"
        )

    def _let_resumer_go(self) -> None:
        if self.held is not None:
            run, conn = self.held
            self.held = None
            self.bound().release(run, conn)


def _launches(fault: Fault, number: int, schedule: Schedule, make: SpecMaker, scene: Scene) -> Batch:
    """Attempt ``number`` paused at ``fault`` (the zombie), attempt ``number + 1`` resuming
    meanwhile (deferred: the pause starts it), armed with its own fault."""
    zombie = make(number, fault)
    next_fault = schedule.for_attempt(number + 1)
    resumer = make(number + 1, next_fault)
    resumer.deferred = True
    return Batch([zombie, resumer], [Pause(fault, resumer), *act(next_fault, resumer, scene)], numbers=2)


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Nemesis:
    raise AssertionError("a pause is launched with its resumer (its kind's launches)")


KIND = register(FaultKind("pause", _act, _launches, summary="SIGSTOP at a point while a resumer runs"))
