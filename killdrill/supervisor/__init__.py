"""The supervisor: launch attempts, trace their boundaries, kill whole process trees.

One attempt (or several at once, for concurrent resumers) is driven by a single-threaded
event loop over a selector: control-channel sockets, the processes' exit (a pidfd where
the kernel has it) and timers (offset kills, delayed kills, holds, the per-attempt
timeout).  No thread races decide where a kill lands: a named kill is decided while the
agent is blocked at the boundary waiting for our answer.

Killing is of the whole tree, however it detached: each attempt runs under a keeper, a
child subreaper that owns every process the attempt starts and exits only once none is
left (killdrill.containment); the harness freezes and kills the tree it sees at once, the
keeper makes sure.  When the harness dies, even by SIGKILL, the launcher template has
every keeper clean up.  ``interrupt_all`` stops every running supervisor (Ctrl-C, SIGTERM).
"""

from killdrill.errors import HarnessError
from killdrill.supervisor._processes import kill_tree, sweep, tail
from killdrill.supervisor._records import BoundaryHook, LaunchSpec, Running
from killdrill.supervisor._supervisor import (
    DRAINED_EXIT_CODE,
    Interrupted,
    Supervisor,
    clear_interrupt,
    interrupt_all,
)

__all__ = [
    "DRAINED_EXIT_CODE",
    "BoundaryHook",
    "HarnessError",
    "Interrupted",
    "LaunchSpec",
    "Running",
    "Supervisor",
    "clear_interrupt",
    "interrupt_all",
    "kill_tree",
    "sweep",
    "tail",
]
