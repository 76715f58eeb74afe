"""Power loss (``powerloss:POINT``): the kill at POINT, then the machine goes down and comes back.

A SIGKILL ends processes; the kernel still holds everything they wrote.  A power loss also drops
what no one synced.  For a case whose schedule has a power loss, :class:`LossyWorkdir` puts the
case's workdir on the lossy file system (``faults.lossy_mount``: LazyFS's model, data cached in
memory until ``fsync``, names durable at once) for every attempt; when the fault fires, the
drill kills the attempt's whole tree as for any kill, then :meth:`LossyWorkdir.power_loss`
drops every unsynced write and mounts the file system again, so the next attempt resumes from
what was synced.  The attempt records which file lost what (``Attempt.lost_writes``), and the
verdict names the cause (``unsynced_write``, ``verdict.power_loss``).

The harness's own folder (``.killdrill``: the ledger, the plan, the logs) is shown inside the
mount as a symlink to the real folder: it is never lossy and never passes through FUSE.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from killdrill.errors import UsageError
from killdrill.faults.kill import Kill
from killdrill.faults.kinds import FaultKind, Scene, register
from killdrill.faults.lossy_mount import LossyMount, unavailable
from killdrill.points import POWER_LOSS, Schedule
from killdrill.records import Attempt

INDEX_SUFFIXES = ("-shm",)
"""Files that hold no data of their own: SQLite's WAL index (rebuilt from the WAL on open)."""


def has_power_loss(schedule: Schedule) -> bool:
    return any(f.action == POWER_LOSS for f in schedule)


def check_schedule(schedule: Schedule, *, deployment: bool = False) -> None:
    """A :class:`UsageError` (one line) when the schedule has a power loss this drill cannot
    make: no FUSE on this machine, or a deployment (``--serve``: its services share no workdir)."""
    if has_power_loss(schedule):
        first = str(next(f for f in schedule if f.action == POWER_LOSS))
        if deployment:
            raise UsageError(f"{first}: a power loss drills one command, not a deployment (--serve)")
        check_power_loss(first)


def check_power_loss(what: str = "--faults power") -> None:
    """A :class:`UsageError` naming ``what`` and what this machine lacks for a power loss."""
    why = unavailable()
    if why is not None:
        raise UsageError(f"{what}: {why}")


class LossyWorkdir:
    """The case's workdir on the lossy file system (the kind's :class:`~killdrill.faults.kinds.
    CaseLife`): its files move to a backing folder beside it (``.killdrill-lossy-NAME``) and are
    shown at the workdir's own path from the first attempt to the last; ``state`` (the harness's
    folder's name) is passed through, never lossy.  After each step whose fault is a power loss
    that landed, the power goes: :meth:`attempts`."""

    def __init__(self, schedule: Schedule, workdir: Path, state: str) -> None:
        self.schedule = schedule
        self.workdir = workdir
        self.backing = workdir.parent / f".killdrill-lossy-{workdir.name}"
        log = self.backing / state / "lossyfs.log"
        self.mount = LossyMount(self.backing, workdir, link=state, log=log, moved=True)
        self.opened = False

    def open(self) -> None:
        os.rename(self.workdir, self.backing)
        os.mkdir(self.workdir, 0o700)
        self.opened = True
        self.mount.start()

    def attempts(self, batch: list[Attempt]) -> list[Attempt]:
        """The step's attempts (every process reaped), with the power loss applied after the one
        whose fault is a power loss that landed."""
        self.mount.check_alive()
        out = list(batch)
        for i, a in enumerate(out):
            fault = self.schedule.for_attempt(a.number)
            if fault is not None and fault.action == POWER_LOSS and a.killed_at is not None:
                out[i] = self.power_loss(a)
        return out

    def power_loss(self, attempt: Attempt) -> Attempt:
        """Drop what was not synced, then come back up: ``attempt`` with what was lost
        (``lost_writes``) and a note saying it."""
        report = self.mount.crash()
        lost = tuple(
            d for d in report.get("dropped", ()) if not str(d.get("path", "")).endswith(INDEX_SUFFIXES)
        )
        self.mount.start()
        return replace(attempt, lost_writes=lost, notes=(*attempt.notes, lost_note(lost)))

    def close(self) -> None:
        """Unmount (what is still cached written back: the files as the agent left them) and put
        the files back at the workdir's path (the case's evidence)."""
        self.mount.close()
        if self.opened:
            self.opened = False
            with contextlib.suppress(OSError):
                os.rmdir(self.workdir)
            os.rename(self.backing, self.workdir)


def _life(schedule: Schedule, scene: Scene) -> LossyWorkdir:
    return LossyWorkdir(schedule, scene.workdir, scene.state.name)


KIND = register(
    FaultKind(
        POWER_LOSS,
        lambda fault, spec, scene: Kill(fault, spec),  # the trigger is a kill's; the loss follows it
        summary="the kill, then the machine's power lost: the workdir drops every unsynced write",
        life=_life,
    )
)


def with_power_loss(schedule: Schedule, seed: int, index: int) -> Schedule:
    """Chaos (``--faults power``): one run in two (by the seed and the run's index alone) has its
    first plain kill turned into a power loss at the same point or time."""
    rng = random.Random(f"{seed}:{index}:power-loss")
    plain = [i for i, f in enumerate(schedule.faults) if f.is_kill and f.action is None and f.process is None]
    if not plain or rng.random() < 0.5:
        return schedule
    faults = list(schedule.faults)
    faults[plain[0]] = replace(faults[plain[0]], action=POWER_LOSS)
    return Schedule(tuple(faults))


def lost_phrase(w: dict[str, Any]) -> str:
    """One file's loss: ``checkpoint.json (12 bytes seen, 0 kept, never fsynced)``."""
    synced = "fsynced before, not since its last write" if w.get("ever_synced") else "never fsynced"
    return f"{w.get('path')} ({w.get('size_seen')} bytes seen, {w.get('size_kept')} kept, {synced})"


def lost_note(lost: Sequence[dict[str, Any]]) -> str:
    if not lost:
        return "power lost after the kill: nothing unsynced to drop"
    return "power lost after the kill: dropped the unsynced data of " + ", ".join(
        lost_phrase(w) for w in lost
    )
