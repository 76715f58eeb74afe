"""The naive drill's agent wrapper: run a module, SIGKILL itself at one boundary label.

    python -m tests.benchmarks.selfkill LABEL -- MODULE ARGS...

What a team writes by hand before killdrill: a self-kill flag in the agent.  It rebinds the
agent-side ``boundary`` (so the same points exist) to a counter that kills the process at
``LABEL`` (``during:payments.charge``, ``before:x#2``); no channel, no trace, no ledger read.
An empty LABEL runs free.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
from collections import Counter

import killdrill
import killdrill.agent
import killdrill.fakes
import killdrill.fakes.handle

seen: Counter[str] = Counter()


def _self_kill_at(label: str) -> None:
    def boundary(point: str) -> None:
        seen[point] += 1
        n = seen[point]
        if label and (point if n == 1 else f"{point}#{n}") == label:
            os.kill(os.getpid(), signal.SIGKILL)

    killdrill.agent.boundary = boundary
    killdrill.boundary = boundary  # type: ignore[assignment]
    killdrill.fakes.handle.boundary = boundary  # where the in-process fakes announce during:


if __name__ == "__main__":
    label, sep, *rest = sys.argv[1:]
    assert sep == "--" and rest, "usage: selfkill LABEL -- MODULE ARGS..."
    _self_kill_at(label)
    sys.argv = rest
    runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
