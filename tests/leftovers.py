"""Count processes left behind, by a marker in their argv or process name, over repeated scans.

One scan can miss a pid-hopping daemon between two of its pids; scanning every 20 ms for about
a second cannot.  Zombies are dead (this sandbox's init may not reap them) and do not count.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from typing import Any


def _matches(pid: str, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        if stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"Z", b"X"):
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if marker in f.read():
                return True
        with open(f"/proc/{pid}/comm", "rb") as f:
            return marker[:15] in f.read()
    except OSError:
        return False


def scan(marker: str) -> set[int]:
    """The live processes carrying ``marker`` right now."""
    needle, me = marker.encode(), str(os.getpid())
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and p != me and _matches(p, needle)}


def survivors(marker: str, seconds: float = 1.0, interval: float = 0.02) -> set[int]:
    """Every live process carrying ``marker`` seen in any scan during ``seconds``."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while True:
        seen |= scan(marker)
        if time.monotonic() >= deadline:
            return seen
        time.sleep(interval)


def templates(harness: int) -> list[int]:
    """The harness's fork templates (they clean up after a harness that was SIGKILLed)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        if ppid == harness and b"killdrill.process.template" in cmdline:
            found.append(int(pid))
    return found


def wait_gone(pids: list[int], limit_s: float = 10.0) -> float:
    """Seconds until every pid has exited (zombies count as exited)."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if not any(_alive(pid) for pid in pids):
            break
        time.sleep(0.005)
    return time.monotonic() - start


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")


def describe(pids: set[int]) -> list[str]:
    """``pid ppid state name`` of each live pid: who owns a leftover."""
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        out.append(f"{pid} ppid={ppid} {state} {name}")
    return out


def kill(marker: str) -> None:
    """Clean up after a failed test so one failure does not leak into the next ones."""
    import signal

    for _ in range(50):
        found = scan(marker)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def stacks_env() -> dict[str, str]:
    """An environment for a harness under test whose stacks :func:`hung` can dump (faulthandler)."""
    return {**os.environ, "PYTHONFAULTHANDLER": "1"}


def hung(proc: subprocess.Popen[Any], what: str) -> str:
    """A harness that did not stop in time: abort it (faulthandler prints every thread's stack on
    SIGABRT) and say where each thread was, plus what lives under it, for the failure message."""
    import signal

    under: list[str] = []
    with contextlib.suppress(Exception):
        import psutil

        for p in psutil.Process(proc.pid).children(recursive=True):
            under.append(f"{p.pid} {p.status()} {' '.join(p.cmdline())[:120]}")
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    return f"{what}\nprocesses under it:\n" + "\n".join(under) + f"\nits stderr (stacks):\n{err or ''}"
