"""What every probe shares: its command line, its durable state folder, and the fork.

A probe keeps all of its framework's durable state under ``--workdir`` (one folder), and writes the
thread it was started with there (``thread.txt``).  ``--fork-of DIR`` makes the probe a *fork*: on
its first start it copies ``DIR`` (the state a killed case left) into its own ``--workdir`` and
resumes it under the thread written there, so two forks of one kill resume byte-identical state.
Standard library only (an agent imports it at start).
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

THREAD_FILE = "thread.txt"


@dataclass(frozen=True)
class ProbeArgs:
    thread: str
    workdir: str
    interrupt: bool
    approval: str


def parse(prog: str, argv: Sequence[str] | None = None) -> ProbeArgs:
    """Parse the probe's flags; materialize a fork's state; return the thread to run under."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--thread", required=True)
    p.add_argument("--workdir", required=True, help="the folder that holds all durable state")
    p.add_argument("--fork-of", help="resume a copy of this folder's state (fork determinism)")
    p.add_argument("--interrupt", action="store_true", help="the human-in-the-loop form (consume-once)")
    p.add_argument("--approval", default="approved", help="the value every delivery of the interrupt sends")
    a = p.parse_args(argv)
    marker = os.path.join(a.workdir, THREAD_FILE)
    if a.fork_of and not os.path.exists(marker):
        shutil.copytree(a.fork_of, a.workdir, dirs_exist_ok=True)
    os.makedirs(a.workdir, exist_ok=True)
    if os.path.exists(marker):
        with open(marker) as f:
            thread = f.read().strip()  # the thread the state belongs to (a fork's is its origin's)
    else:
        thread = a.thread
        with open(marker + ".tmp", "w") as f:
            f.write(thread)
        os.replace(marker + ".tmp", marker)
    return ProbeArgs(thread, a.workdir, a.interrupt, a.approval)
