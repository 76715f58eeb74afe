"""Fleet faults: the zombie worker (``pause:POINT``) and the upgrade (``resume_with``).

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

**The upgrade.**  ``resume_with`` (``--resume-with -- CMD...``) runs attempts 2..k with another
command (version N+1), discovery and the baseline stay the first command's (version N): a
deploy must not change what the run does.  Only this module and two call sites in the drill
know about either fault.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from killdrill.points import Fault, Schedule, ScheduleError, occurrence_label
from killdrill.process.containment import signal_all, subtree, until_stopped
from killdrill.process.control import Connection
from killdrill.process.supervisor import LaunchSpec, Running, Supervisor
from killdrill.records import Attempt, TraceEvent

CHAOS_FAULTS = ("kill", "pause", "upgrade", "net", "power")
"""What chaos may draw (``--faults``): kills always; pauses, upgrades, connection faults
(``net``: drop:/reset: toward the HTTP fakes, killdrill.faults.network) and power losses
(``power``: a kill turned into ``powerloss:``, killdrill.faults.powerloss) when asked."""


def draw_faults(
    schedule: Schedule, labels: Sequence[str], seed: int, index: int, faults: Sequence[str]
) -> Schedule:
    """Chaos run ``index`` with pauses drawn in (a function of the seed, the index and the labels).

    Half the runs turn their first kill into a pause at the boundary it aims at (the first
    boundary for a kill before any), half of those continue the zombie at a random point of
    the resumer instead of its exit.  Upgrades are not drawn here: with ``upgrade`` every run
    resumes with ``--resume-with``'s command.
    """
    if "pause" not in faults or not schedule.faults or not labels:
        return schedule
    import random

    rng = random.Random(f"killdrill-chaos:{seed}:{index}:pause")
    paused, until, other = rng.random() < 0.5, rng.random() < 0.5, rng.choice(list(labels))
    if not paused:
        return schedule
    first = schedule.faults[0]
    aim = (first.point, first.occurrence) if first.point is not None else _split_label(labels[0])
    pause = Fault(point=aim[0], occurrence=aim[1], pause=True, until=other if until else None)
    rest = schedule.faults[1:]
    if rest and rest[0].pause:
        rest = rest[1:]
    return Schedule((pause, *rest))


def _split_label(label: str) -> tuple[str, int]:
    point, _, occ = label.partition("#")
    return point, int(occ) if occ else 1


def check_schedule(schedule: Schedule) -> None:
    """A pause's resumer runs the next item: it may be a kill, not another pause."""
    for first, second in zip(schedule.faults, schedule.faults[1:], strict=False):
        if first.pause and second.pause:
            raise ScheduleError(
                f"{first},{second}", "the resumer of a pause cannot be paused itself; put a kill or nothing"
            )


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


@dataclass
class Pause:
    """The boundary hook of one zombie case: pause, start the resumer, continue, hand over."""

    kill: Fault
    resumer: LaunchSpec
    supervisor: Supervisor | None = None
    zombie: Running | None = None
    resumer_run: Running | None = None
    stopped: list[int] = field(default_factory=list)
    paused_at: float = 0.0
    state: str = "armed"  # armed -> paused -> continued
    held: tuple[Running, Connection] | None = None

    def bind(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def __call__(self, run: Running, event: TraceEvent, conn: Connection) -> bool:
        assert self.supervisor is not None
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
            own = run.spec.kill
            if own is not None and not run.fired and own.at(event.point, event.occurrence):
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
        assert self.supervisor is not None
        run.fired = True
        self.zombie, self.state = run, "paused"
        self.stopped = stop_tree(run)
        self.paused_at = time.monotonic()
        self.supervisor.release(run, conn)  # read once it runs again
        self.resumer_run = self.supervisor.start(self.resumer)

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
        if self.held is not None and self.supervisor is not None:
            run, conn = self.held
            self.held = None
            self.supervisor.release(run, conn)


def upgrade_notes(
    first: Sequence[str], resume_with: Sequence[str] | None, attempts: Sequence[Attempt]
) -> list[str]:
    """Say which attempts ran the upgrade, and that the yardstick is the first command's."""
    later = [a.number for a in attempts if a.number > 1]
    if not resume_with or not later:
        return []
    import shlex

    return [
        f"upgrade: attempt(s) {', '.join(map(str, sorted(set(later))))} ran {shlex.join(resume_with)};"
        f" judged against the clean run of {shlex.join(first)}"
    ]


def resume_argv(first: Sequence[str], resume_with: Sequence[str] | None, number: int) -> Sequence[str]:
    """The command of attempt ``number``: the upgrade's from attempt 2 on, when there is one."""
    return resume_with if resume_with and number > 1 else first
