"""A lossy mount the harness owns: a folder whose unsynced data a simulated power loss drops.

:class:`LossyMount` runs the lossy file system (``faults._lossyfs``, a FUSE passthrough with the
LazyFS model) over a backing folder, in a process group of its own: mounted before the case's
first attempt, :meth:`LossyMount.crash`\\ ed when the fault fires (the file system process ends
without writing what was not synced, and says what it dropped), mounted again for the next
attempt, unmounted at the end.  The mount is claimed (``ownership``) before it is made, so a
harness that dies leaves it to the next run's sweep (``drill.sweep``: a lazy ``fusermount3 -u
-z``); the file system process also unmounts itself when the harness's end of its stdin closes,
and ``auto_unmount`` unmounts when the process dies.

Needs ``/dev/fuse``, ``fusermount3`` (Debian: ``fuse3``), libfuse3 and the ``mfusepy`` package
(``pip install 'killdrill[power-loss]'``): :func:`unavailable` says which is missing.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from killdrill import ownership
from killdrill.errors import HarnessError

FSNAME = "killdrill-lossy"
"""The source name of every lossy mount in ``/proc/mounts`` (the sweep unmounts only these)."""

_MOUNT_TIMEOUT_S = 15.0


def unavailable() -> str | None:
    """Why a lossy mount cannot be made on this machine (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "power loss needs Linux (a FUSE file system)"
    if not os.path.exists("/dev/fuse"):
        return "power loss needs /dev/fuse (FUSE; in a container: --device /dev/fuse)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "power loss needs read and write access to /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "power loss needs fusermount3 (Debian/Ubuntu: apt-get install fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "power loss needs libfuse3 (Debian/Ubuntu: apt-get install fuse3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "power loss needs the mfusepy package: pip install 'killdrill[power-loss]'"
    return None


def _escaped(path: Path) -> str:
    """``path`` as ``/proc/mounts`` spells it (space, tab, newline, backslash octal-escaped)."""
    text = str(path)
    for ch in "\\ \t\n":
        text = text.replace(ch, f"\\{ord(ch):03o}")
    return text


def is_mounted(path: Path) -> bool:
    """Whether a lossy file system is mounted at ``path``."""
    want = _escaped(path)
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            return any(
                fields[0] == FSNAME and fields[1] == want
                for fields in (line.split(" ") for line in f)
                if len(fields) > 2
            )
    except OSError:
        return False


def unmount(path: Path) -> None:
    """Unmount the lossy file system at ``path`` lazily (a process still in it keeps its view
    until it lets go; nothing new enters); nothing if none is mounted there."""
    if is_mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True, timeout=30, check=False)


class LossyMount:
    """``backing`` shown at ``mountpoint`` through the lossy file system (``link``: a name in
    ``backing`` shown as a symlink to itself, never lossy: the harness's ``.killdrill``)."""

    def __init__(
        self, backing: Path, mountpoint: Path, *, link: str | None = None, log: Path | None = None
    ) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.link = link
        self.log = log
        self._proc: subprocess.Popen[str] | None = None
        self._claim: str | None = None
        self.mounts = 0  # how many times it was mounted (1 + crashes survived)

    @property
    def mounted(self) -> bool:
        return self._proc is not None

    def start(self) -> None:
        """Mount; returns once the mount answers (a :class:`HarnessError` if it never does)."""
        if self._proc is not None:
            return
        if self._claim is None:
            self._claim = ownership.claim(ownership.FUSE_MOUNT, path=str(self.mountpoint))
        argv = [sys.executable, "-m", "killdrill.faults._lossyfs", str(self.backing), str(self.mountpoint)]
        if self.link:
            argv += ["--link", self.link]
        stderr: IO[str] | int = subprocess.DEVNULL
        if self.log is not None:
            stderr = open(self.log, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                start_new_session=True,  # never in a process group the drill kills
                close_fds=True,
            )
        finally:
            if not isinstance(stderr, int):
                stderr.close()
        self._proc = proc
        deadline = time.monotonic() + _MOUNT_TIMEOUT_S
        while not is_mounted(self.mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                self._stop(proc)
                raise HarnessError(
                    f"the lossy file system did not mount at {self.mountpoint}"
                    + (f" (see {self.log})" if self.log is not None else "")
                )
            time.sleep(0.005)
        self.mounts += 1

    def crash(self) -> dict[str, Any]:
        """Power loss: the file system process ends without writing what was not synced (the
        caller killed every process that used it first); what it dropped: ``{"dropped": [{path,
        size_seen, size_kept, unsynced_bytes, ever_synced}], "fsyncs": {path: n}}``.  Not
        mounted again: :meth:`start` is the restart."""
        proc = self._proc
        if proc is None:
            return {"dropped": [], "fsyncs": {}}
        report: dict[str, Any] = {"dropped": [], "fsyncs": {}}
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("crash\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if line:
                report = json.loads(line)
        except (OSError, ValueError):
            pass
        self._stop(proc)
        return report

    def _stop(self, proc: subprocess.Popen[str]) -> None:
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()  # a living file system unmounts itself at end of input
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        unmount(self.mountpoint)
        self._proc = None

    def close(self, *, flush: bool = True) -> None:
        """Unmount and release the claim; ``flush``: write what it still holds unsynced back first
        (the files as the processes left them), else that goes as at a crash."""
        proc = self._proc
        if proc is not None:
            if flush:
                with contextlib.suppress(OSError, ValueError):
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write("flush\n")
                    proc.stdin.flush()
                    proc.stdout.readline()
            self._stop(proc)
        unmount(self.mountpoint)
        if self._claim is not None and not is_mounted(self.mountpoint):
            ownership.release(self._claim)
            self._claim = None
