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

import atexit
import contextlib
import ctypes.util
import functools
import importlib.util
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from killdrill import ownership
from killdrill.errors import HarnessError

FSNAME = "killdrill-lossy"
"""The source name of every lossy mount in ``/proc/mounts`` (the sweep unmounts only these)."""

_MOUNT_TIMEOUT_S = 15.0
_FILE_SYSTEM = Path(__file__).with_name("_lossyfs.py")
"""The file system's own program (run as a file: its process imports no killdrill)."""


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
    if _libfuse3() is None:
        return "power loss needs libfuse3 (Debian/Ubuntu: apt-get install fuse3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "power loss needs the mfusepy package: pip install 'killdrill[power-loss]'"
    return None


@functools.lru_cache(maxsize=1)
def _libfuse3() -> str | None:
    return ctypes.util.find_library("fuse3")


def _env() -> dict[str, str]:
    """The file system process's environment: libfuse 3 named (``mfusepy`` would look for
    libfuse 2 first, and each look-up runs ``ldconfig``)."""
    env = dict(os.environ)
    lib = _libfuse3()
    if lib is not None:
        env["FUSE_LIBRARY_PATH"] = lib
    return env


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


def restore(path: Path, backing: Path) -> None:
    """After a harness died mid-case: ``path`` (an empty mountpoint) gets its files back from
    ``backing`` (a workdir moved there for its lossy mount)."""
    if is_mounted(path) or not backing.is_dir():
        return
    with contextlib.suppress(OSError):
        path.rmdir()  # only when empty: a folder with files in it is not ours to replace
    if not path.exists():
        os.rename(backing, path)


def unmount(path: Path) -> None:
    """Unmount the lossy file system at ``path`` lazily (a process still in it keeps its view
    until it lets go; nothing new enters); nothing if none is mounted there."""
    if is_mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True, timeout=30, check=False)


_SPARE_LOCK = threading.Lock()
_spare: tuple[int, subprocess.Popen[bytes]] | None = None  # (the harness's pid, a ready process)


def _new_process() -> subprocess.Popen[bytes]:
    # the file itself, not ``-m``: its process imports no killdrill (40 ms a start)
    return subprocess.Popen(
        [sys.executable, str(_FILE_SYSTEM)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # until its order names the case's log
        bufsize=0,
        start_new_session=True,  # never in a process group the drill kills
        close_fds=True,
        env=_env(),
    )


def _ready_process() -> subprocess.Popen[bytes]:
    """A file system process for a mount: the spare started for it (its interpreter and imports
    done while the previous case ran: ~0.1-0.3 s a case), and a new spare for the next.  A spare
    waits on its stdin: it ends with the harness, or at this process's exit."""
    global _spare
    with _SPARE_LOCK:
        mine = _spare if _spare is not None and _spare[0] == os.getpid() else None  # not a parent's
        proc = mine[1] if mine is not None and mine[1].poll() is None else _new_process()
        if _spare is None:
            atexit.register(_drop_spare)
        _spare = (os.getpid(), _new_process())
    return proc


def _drop_spare() -> None:
    global _spare
    with _SPARE_LOCK:
        held, _spare = _spare, None
    if held is not None and held[0] == os.getpid():
        _end(held[1], timeout_s=5)


def _end(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """End a file system process: its input closed (a living one unmounts itself and exits),
    its process group killed if it is still there after ``timeout_s``."""
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class LossyMount:
    """``backing`` shown at ``mountpoint`` through the lossy file system (``link``: a name in
    ``backing`` shown as a symlink to itself, never lossy: the harness's ``.killdrill``)."""

    def __init__(
        self,
        backing: Path,
        mountpoint: Path,
        *,
        link: str | None = None,
        log: Path | None = None,
        moved: bool = False,
    ) -> None:
        self.backing = backing
        self.moved = moved  # the mountpoint's own files were moved to backing: a sweep moves them back
        self.mountpoint = mountpoint
        self.link = link
        self.log = log
        self._proc: subprocess.Popen[bytes] | None = None
        self._claim: str | None = None
        self._buffer = b""
        self._crashed = False  # the process mounts again by itself after a crash
        self.mounts = 0  # how many times it was mounted (1 + crashes survived)

    @property
    def mounted(self) -> bool:
        return self._proc is not None and not self._crashed

    def start(self) -> None:
        """Mount (again, after :meth:`crash`); returns once the mount answers (a
        :class:`HarnessError` if it never does)."""
        if self._proc is not None and not self._crashed:
            return
        if self._proc is None:
            self._spawn()
        self._crashed = False
        if self._line() != "mounted":
            self._fail("did not mount")
        self.mounts += 1

    def _spawn(self) -> None:
        if self._claim is None:
            moved = {"backing": str(self.backing)} if self.moved else {}
            self._claim = ownership.claim(ownership.FUSE_MOUNT, path=str(self.mountpoint), **moved)
        self._proc = _ready_process()
        self._buffer = b""
        order = {"backing": str(self.backing), "mountpoint": str(self.mountpoint), "link": self.link}
        self._send(json.dumps({**order, "log": str(self.log) if self.log is not None else None}))

    def _send(self, command: str) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(command.encode() + b"\n")
        except OSError:
            self._fail(f"went away before {command!r}")

    def _line(self) -> str:
        """The file system's next line on stdout (a :class:`HarnessError` past the timeout or
        at its end)."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + _MOUNT_TIMEOUT_S
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._fail("did not answer")
            chunk = os.read(fd, 65536)
            if not chunk:
                self._fail("ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def _fail(self, what: str) -> NoReturn:
        if self._proc is not None:
            self._stop(self._proc)
        raise HarnessError(
            f"the lossy file system at {self.mountpoint} {what}"
            + (f" (see {self.log})" if self.log is not None else "")
        )

    def check_alive(self) -> None:
        """A :class:`HarnessError` if the file system process ended under a mounted case (what
        the agent saw since was the harness's failure, not its own)."""
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            self._fail(f"ended (exit {proc.returncode}) while the case ran")

    def crash(self) -> dict[str, Any]:
        """Power loss (the caller killed every process that used the mount first): the cache is
        dropped, nothing of it written; what it dropped: ``{"dropped": [{path, size_seen,
        size_kept, unsynced_bytes, ever_synced}], "fsyncs": {path: n}}``.  The file system comes
        back with an empty cache: :meth:`start` waits for it."""
        if self._proc is None or self._crashed:
            return {"dropped": [], "fsyncs": {}}
        self._send("crash")
        line = self._line()
        self._crashed = True
        try:
            report: dict[str, Any] = json.loads(line)
        except ValueError:
            self._fail(f"said {line!r} at a crash")
        return report

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = None
        _end(proc, timeout_s=10)
        unmount(self.mountpoint)

    def close(self, *, flush: bool = True) -> None:
        """Unmount and release the claim; ``flush``: write what it still holds unsynced back first
        (the files as the processes left them), else that goes as at a crash."""
        proc = self._proc
        if proc is not None:
            if flush:
                with contextlib.suppress(HarnessError):
                    if self._crashed:
                        self.start()
                    self._send("flush")
                    self._line()
            if self._proc is not None:
                self._stop(self._proc)
        unmount(self.mountpoint)
        if self._claim is not None and not is_mounted(self.mountpoint):
            ownership.release(self._claim)
            self._claim = None
