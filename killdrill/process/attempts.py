"""What the supervisor starts and tracks: the launch spec of an attempt and the attempt in flight."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from killdrill.points import Fault
from killdrill.process.control import ControlListener
from killdrill.process.forks import ForkTemplate
from killdrill.records import TraceEvent


@dataclass
class LaunchSpec:
    """Everything needed to start one attempt's process."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None
    stdout_path: str
    stderr_path: str
    number: int
    fault: Fault | None  # the schedule's fault aimed at this launch (its record; a nemesis acts it out)
    timeout_s: float
    signal_name: str = "KILL"  # "KILL", or "TERM" for drain drills
    grace_s: float = 5.0
    control_dir: str = ""
    template: ForkTemplate | None = None  # fork from a warm template instead of spawning
    deferred: bool = False  # not started by run_many: a nemesis starts it (``Supervisor.start``), or never


@dataclass
class Running:
    """An attempt in flight: its process, channel, trace and what has been done to it."""

    spec: LaunchSpec
    listener: ControlListener
    popen: Any  # subprocess.Popen, or a forks.ForkedProcess
    started: float
    stdout: IO[bytes] | None  # the attempt's log files; None under a template (its keeper writes them)
    stderr: IO[bytes] | None
    trace: list[TraceEvent] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    fired: bool = False
    killed_at: str | None = None
    sent_signal: str | None = None
    outcome: str | None = None
    returncode: int | None = None
    ended: float | None = None
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # a restart= at its trigger: Attempt.restarted
    pidfd: int | None = None
    term_sent: bool = False

    @property
    def alive(self) -> bool:
        return self.returncode is None

    @property
    def tree_root(self) -> int:
        """The pid every process of this attempt descends from: its keeper (or the agent, without)."""
        return getattr(self.popen, "keeper", None) or int(self.popen.pid)

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.started) * 1000.0
