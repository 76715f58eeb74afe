"""Process-level helpers of the supervisor: output tails, killing an attempt's tree, the sweep
of keeper-less leftovers."""

from __future__ import annotations

import contextlib
import os
import signal

from killdrill import envvars
from killdrill.process.containment import kill_attempt

_TAIL_BYTES = 4000


def tail(path: str, limit: int = _TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a file, as text ('' when missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return ("..." + text) if size > limit else text


def kill_tree(pid: int, sig: int = signal.SIGKILL, keeper: int | None = None) -> None:
    """Signal the attempt led by ``pid`` (and, with its keeper, everything the keeper owns)."""
    kill_attempt(pid, keeper, sig)


def sweep(token: str) -> list[int]:
    """SIGKILL every process whose environment carries this attempt token; return their pids.

    Only where attempts cannot have a keeper (no prctl): catches the daemons that kept it.
    """
    killed = []
    me = os.getpid()
    needle = f"{envvars.CONTROL_TOKEN}={token}".encode()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed
