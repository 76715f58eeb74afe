"""Files watched for writes: Linux inotify through libc (``ctypes``), one fd for all of them.

A deployment waits for its services (a ``log:`` line, a listening port) and for the work they
say they finish; re-reading their files on a timer notices each a timer's tick late.  Watched,
a write is noticed as it lands: the fd is readable, the supervisor's loop runs :meth:`dispatch`
(``Stage.watch``), which calls the action of every file written since.  ``FileWatch.open()`` is
None where there is no inotify (not Linux, a libc without it, no instance left): the caller's
timer then does all the noticing, as it must anyway for what a watch cannot see.

Layer: process; standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import sys
import weakref
from collections.abc import Callable

__all__ = ["FileWatch"]

IN_MODIFY = 0x00000002
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)

_libc: ctypes.CDLL | None = None


def _inotify() -> ctypes.CDLL | None:
    """The process's libc when it has inotify (looked up once), else None."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)  # the symbols already loaded: no library search
            for name, args in (
                ("inotify_init1", [ctypes.c_int]),
                ("inotify_add_watch", [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]),
                ("inotify_rm_watch", [ctypes.c_int, ctypes.c_int]),
            ):
                fn = getattr(libc, name)
                fn.argtypes, fn.restype = args, ctypes.c_int
            _libc = libc
    return _libc


class FileWatch:
    """Files watched for writes (``IN_MODIFY``), each with the actions its writes call.  Not
    thread-safe: one supervisor's loop owns it."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)  # a watch dropped unclosed frees its fd
        self._paths: dict[int, str] = {}  # watch descriptor -> path
        self._actions: dict[str, list[Callable[[], None]]] = {}  # path -> what a write to it calls

    @classmethod
    def open(cls) -> FileWatch | None:
        """A new watch (non-blocking, closed on exec), or None where there is no inotify."""
        libc = _inotify()
        if libc is None:
            return None
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        return None if fd < 0 else cls(libc, fd)

    def fileno(self) -> int:
        return self._fd

    def add(self, path: str, action: Callable[[], None]) -> bool:
        """Call ``action`` on each write to ``path`` from now on, after the actions added before.
        False: it cannot be watched (no such file yet, out of watches): the caller's timer covers it."""
        if self._fd < 0:
            return False
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), IN_MODIFY)
        if wd < 0:
            return False
        self._paths[wd] = path
        self._actions.setdefault(path, []).append(action)
        return True

    def remove(self, path: str, action: Callable[[], None]) -> None:
        """Stop calling ``action`` on writes to ``path``; the file's watch ends with its last action."""
        actions = self._actions.get(path, [])
        if action in actions:
            actions.remove(action)
        if actions or self._actions.pop(path, None) is None:
            return
        for wd in [wd for wd, p in self._paths.items() if p == path]:
            del self._paths[wd]
            if self._fd >= 0:
                self._libc.inotify_rm_watch(self._fd, wd)

    def watched(self) -> list[str]:
        return list(self._actions)

    def written(self) -> list[str]:
        """The watched files written since the last call, each once, in the order first written
        (every file when the kernel's queue overflowed: any of them may have been)."""
        out: dict[str, None] = {}
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            at = 0
            while at + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
                at += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    out.update(dict.fromkeys(self._actions))
                elif mask & IN_IGNORED:  # the file is gone, or its watch removed
                    self._paths.pop(wd, None)
                elif wd in self._paths:
                    out[self._paths[wd]] = None
        return [p for p in out if p in self._actions]

    def dispatch(self) -> None:
        """Run the action of every file written since the last call (the loop's callback).  An
        action may add or remove watches."""
        for path in self.written():
            for action in list(self._actions.get(path, ())):
                if action in self._actions.get(path, ()):  # not removed by an action before it
                    action()

    def close(self) -> None:
        self._closer()
        self._fd = -1
        self._paths.clear()
        self._actions.clear()
