"""Power loss (``powerloss:POINT``): the kill at POINT, then the machine goes down and comes back.

A SIGKILL ends processes; the kernel still holds everything they wrote.  A power loss also drops
what no one synced.  For a case whose schedule has a power loss, :class:`LossyWorkdir` puts the
case's workdir on the lossy file system (``faults.lossy_mount``: LazyFS's model, data cached in
memory until ``fsync``, names durable at once) for every attempt; when the fault fires, the
drill kills the attempt's whole tree as for any kill, then :meth:`LossyWorkdir.power_loss`
drops every unsynced write and mounts the file system again, so the next attempt resumes from
what was synced.  The attempt records which file lost what (``Attempt.lost_writes``), and the
verdict names the cause (``unsynced_write``, ``verdict.power_loss``).

In a deployment (``--serve``) the machine runs every process of the case: ``powerloss:NAME:POINT``
(or any process's POINT) kills the process that reaches it and every other one with it
(:class:`MachineDown`, through ``Targets.down``); once all are reaped the file system drops what
was not synced, then the services start again and the driver is re-run once they are ready.
What was lost is recorded on the last launch before the loss (every later launch came after it).

The harness's own folder (``.killdrill``: the ledger, the plan, the logs) is shown inside the
mount as a symlink to the real folder: it is never lossy and never passes through FUSE.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from killdrill.errors import UsageError
from killdrill.faults.kill import Kill
from killdrill.faults.kinds import FaultKind, Scene, Targets, register
from killdrill.faults.lossy_mount import LossyMount, unavailable
from killdrill.points import POWER_LOSS, Fault, Schedule
from killdrill.process.attempts import LaunchSpec, Running
from killdrill.records import Attempt

INDEX_SUFFIXES = ("-shm",)
"""Files that hold no data of their own: SQLite's WAL index (rebuilt from the WAL on open)."""


def has_power_loss(schedule: Schedule) -> bool:
    return any(f.action == POWER_LOSS for f in schedule)


def check_schedule(schedule: Schedule) -> None:
    """A :class:`UsageError` (one line) when the schedule has a power loss this machine cannot
    make (no FUSE)."""
    if has_power_loss(schedule):
        check_power_loss(str(next(f for f in schedule if f.action == POWER_LOSS)))


def check_power_loss(what: str = "--faults power") -> None:
    """A :class:`UsageError` naming ``what`` and what this machine lacks for a power loss."""
    why = unavailable()
    if why is not None:
        raise UsageError(f"{what}: {why}")


class LossyFolder:
    """One folder on the lossy file system: its files moved to a backing folder beside it
    (``.killdrill-lossy-NAME``) and shown at its own path while the case runs (``link``: a name
    in it passed through, never lossy: the harness's ``.killdrill``)."""

    def __init__(
        self, path: Path, backing: Path, *, link: str | None = None, log: Path | None = None
    ) -> None:
        self.path = path
        self.backing = backing
        self.mount = LossyMount(backing, path, link=link, log=log, moved=True)
        self.opened = False

    def open(self) -> None:
        os.rename(self.path, self.backing)
        self.opened = True
        os.mkdir(self.path, 0o700)
        self.mount.start()

    def close(self) -> None:
        """Unmount (what is still cached written back: the files as the agent left them) and put
        the files back at the folder's path."""
        self.mount.close()
        if self.opened:
            self.opened = False
            with contextlib.suppress(OSError):
                os.rmdir(self.path)
            os.rename(self.backing, self.path)


class LossyWorkdir:
    """The case's workdir, and the folders named by ``--power-loss-path``, on the lossy file
    system (the kind's :class:`~killdrill.faults.kinds.CaseLife`) from the first attempt to the
    last; ``state`` (the harness's folder's name) is passed through, never lossy.  After each
    step whose fault is a power loss that landed, the power goes: :meth:`attempts`; a
    ``deployment``'s goes while its one step runs (:meth:`lose`)."""

    def __init__(
        self,
        schedule: Schedule,
        workdir: Path,
        state: str,
        paths: Sequence[Path] = (),
        *,
        deployment: bool = False,
    ) -> None:
        self.schedule = schedule
        self.workdir = workdir
        self.deployment = deployment
        self.lost: dict[int, tuple[list[dict[str, Any]], str]] = {}  # a deployment's: by the attempt before
        backing = workdir.parent / f".killdrill-lossy-{workdir.name}"
        self.folders = [LossyFolder(workdir, backing, link=state, log=backing / state / "lossyfs.log")]
        for path in paths:
            side = path.parent / f".killdrill-lossy-{path.name}-{secrets.token_hex(4)}"
            self.folders.append(
                LossyFolder(path, side, log=backing / state / f"lossyfs-{len(self.folders)}.log")
            )

    def open(self) -> None:
        for folder in self.folders:
            folder.open()

    def attempts(self, batch: list[Attempt]) -> list[Attempt]:
        """The step's attempts (every process reaped), with the power loss applied after the one
        whose fault is a power loss that landed (a deployment's: what :meth:`lose` recorded)."""
        for folder in self.folders:
            folder.mount.check_alive()
        out = list(batch)
        for i, a in enumerate(out):
            fault = self.schedule.for_attempt(a.number)
            if a.number in self.lost:
                lost, note = self.lost.pop(a.number)
                out[i] = replace(a, lost_writes=tuple(lost), notes=(*a.notes, note))
            elif (
                not self.deployment
                and fault is not None
                and fault.action == POWER_LOSS
                and a.killed_at is not None
            ):
                out[i] = self.power_loss(a)
        return out

    def power_loss(self, attempt: Attempt) -> Attempt:
        """Drop what was not synced, then come back up: ``attempt`` with what was lost
        (``lost_writes``: paths in the workdir relative, others absolute) and a note saying it."""
        lost = self.crash()
        return replace(attempt, lost_writes=tuple(lost), notes=(*attempt.notes, lost_note(lost)))

    def lose(self, number: int, where: str) -> None:
        """A deployment's power loss (every process of the case reaped): drop what was not synced
        and come back up, recorded for attempt ``number``, the last launch before it."""
        lost = self.crash()
        self.lost[number] = (lost, lost_note(lost, where))

    def crash(self) -> list[dict[str, Any]]:
        """Drop what was not synced and mount again: what each file lost."""
        lost: list[dict[str, Any]] = []
        for folder in self.folders:
            for d in folder.mount.crash().get("dropped", ()):
                if str(d.get("path", "")).endswith(INDEX_SUFFIXES):
                    continue
                if folder.path != self.workdir:
                    d = {**d, "path": str(folder.path / str(d["path"]))}
                lost.append(d)
        for folder in self.folders:
            folder.mount.start()
        return lost

    def close(self) -> None:
        for folder in reversed(self.folders):
            folder.close()


def named_paths(options: Any, workdir: Path, thread: str) -> list[Path]:
    """The folders ``--power-loss-path`` names (``{workdir}``, ``{thread}`` filled), each an
    existing directory outside the workdir (one inside it is lossy with it already): a
    :class:`UsageError` (one line) for any other."""
    out: list[Path] = []
    for text in getattr(options, "power_loss_paths", ()) or ():
        path = Path(os.path.abspath(text.replace("{workdir}", str(workdir)).replace("{thread}", thread)))
        if path == workdir or workdir in path.parents:
            continue
        if not path.is_dir():
            raise UsageError(f"--power-loss-path {text}: {path} is not an existing directory")
        if path in workdir.parents or path == Path(path.anchor):
            raise UsageError(
                f"--power-loss-path {text}: {path} holds the case's workdir; name a folder of its own"
            )
        out.append(path)
    return out


def _life(schedule: Schedule, scene: Scene) -> LossyWorkdir:
    paths = named_paths(scene.options, scene.workdir, scene.thread)
    deployment = scene.options is not None and bool(scene.options.serve)
    return LossyWorkdir(schedule, scene.workdir, scene.state.name, paths, deployment=deployment)


@dataclass(eq=False)
class MachineDown(Kill):
    """A deployment's power loss: the kill at the trigger, and with it every process of the case
    (``Targets.down``: none restarted until all are reaped); then the lossy file system drops
    what was not synced and comes back before the deployment boots."""

    targets: Targets
    life: LossyWorkdir

    def _fire(self, run: Running, label: str) -> None:
        super()._fire(run, label)
        if run.killed_at != label:  # the launch was gone already: the kill missed, nothing went down
            return
        stage = self.bound()
        live = [r for r in stage.running if r.alive]
        last = max(r.spec.number for r in stage.running)
        others = ", ".join(f"attempt {r.spec.number}" for r in live if r is not run)
        run.notes.append(
            "the machine lost power here" + (f", every other process killed ({others})" if others else "")
        )
        self.targets.down(str(self.fault), lambda: self.life.lose(last, f"at {self.fault}"))


def _act(fault: Fault, spec: LaunchSpec, scene: Scene) -> Kill:
    """One command: the kill (its case's life drops what was not synced after the step); a
    deployment: the machine down with it, while the case runs."""
    life = scene.lives.get(POWER_LOSS)
    if scene.targets is None or not isinstance(life, LossyWorkdir):
        return Kill(fault, spec)
    return MachineDown(fault, spec, scene.targets, life)


KIND = register(
    FaultKind(
        POWER_LOSS,
        _act,  # the trigger is a kill's; the loss follows it
        summary="the kill, then the machine's power lost: the workdir drops every unsynced write",
        life=_life,
    )
)


def with_power_loss(schedule: Schedule, seed: int, index: int) -> Schedule:
    """Chaos (``--faults power``): one run in two (by the seed and the run's index alone) has its
    first plain kill turned into a power loss at the same point or time."""
    rng = random.Random(f"{seed}:{index}:power-loss")
    plain = [i for i, f in enumerate(schedule.faults) if f.is_kill and f.action is None]
    if not plain or rng.random() < 0.5:
        return schedule
    faults = list(schedule.faults)
    faults[plain[0]] = replace(faults[plain[0]], action=POWER_LOSS)
    return Schedule(tuple(faults))


def lost_phrase(w: dict[str, Any]) -> str:
    """One file's loss: ``checkpoint.json (12 bytes seen, 0 kept, never fsynced)``."""
    synced = "fsynced before, not since its last write" if w.get("ever_synced") else "never fsynced"
    return f"{w.get('path')} ({w.get('size_seen')} bytes seen, {w.get('size_kept')} kept, {synced})"


def lost_note(lost: Sequence[dict[str, Any]], where: str = "after the kill") -> str:
    if not lost:
        return f"power lost {where}: nothing unsynced to drop"
    return f"power lost {where}: dropped the unsynced data of " + ", ".join(lost_phrase(w) for w in lost)
