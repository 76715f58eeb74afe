"""The lossy file system: a FUSE passthrough that keeps written data in memory until it is synced.

Run as its own process by :mod:`killdrill.faults.lossy_mount` (``python .../_lossyfs.py``, told
what to mount on its first line of stdin); it follows the model of Jepsen's
LazyFS (a FUSE file system with its own page cache that flushes a file's data only when the
application asks, and drops every unsynced page on ``clear-cache``):

- **data** (``write``, ``truncate``, an ``O_TRUNC`` open) goes to an in-memory cache of the
  file's pages, keyed by the backing file's inode (a rename keeps it).  Reads see the cache, so
  every process sees every write, as on a real kernel.  ``fsync``/``fdatasync`` of a file writes
  that file's cached pages (and size) to the backing file and ``fsync``\\ s it: from then on they
  survive a crash.  Nothing else does: not ``close``, not a process's exit, not a rename.
- **names and metadata** (create, mkdir, rename, unlink, link, symlink, chmod, utimens) are
  applied to the backing directory at once, as LazyFS does: a rename or a new file survives a
  crash without an ``fsync`` of its directory (``fsyncdir`` is passed through).  So a file
  created, written and renamed without an ``fsync`` of the file survives as its name with the
  content it last had synced: empty for a new file, the ext4 "zero-length file" of a
  replace-by-rename.  A missing directory ``fsync`` alone is not caught.
- ``--link NAME`` (the harness's ``.killdrill``) is shown as a symlink to the backing's own
  ``NAME``: the harness's evidence never passes through this process and is never lossy.

The harness talks on stdin, this process answers on stdout: ``mounted`` when a mount is in place;
``flush`` writes every cached file back (the case is over, no crash: its files kept as its
processes left them); ``crash`` prints the files whose unsynced data is dropped (one JSON line),
drops them, unmounts and mounts again with an empty cache (the machine came back); end of input
(the harness is gone) unmounts and exits (``auto_unmount`` unmounts if this process dies).  This process
imports ``mfusepy`` (the extra ``power-loss``) and needs libfuse3 with ``fusermount3``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

PAGE = 4096
_STAT_KEYS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
_TIME_KEYS = ("st_atime", "st_mtime", "st_ctime")  # in ns (``use_ns``)


def _attrs(st: os.stat_result) -> dict[str, Any]:
    attrs: dict[str, Any] = {k: getattr(st, k) for k in _STAT_KEYS}
    attrs.update({k: getattr(st, k + "_ns") for k in _TIME_KEYS})
    return attrs


@dataclass
class Dirty:
    """One file's unsynced state: its cached pages, its size as processes see it, and the size
    below which the backing file's bytes still count (a truncate voids what lies past it)."""

    path: str
    size: int
    floor: int
    pages: dict[int, bytearray] = field(default_factory=dict)
    written: int = 0  # bytes written since the last sync

    def page(self, index: int, fd: int) -> bytearray:
        """Page ``index``, read from the backing file (zero past ``floor``) on first touch."""
        found = self.pages.get(index)
        if found is None:
            start = index * PAGE
            found = bytearray(PAGE)
            if start < self.floor:
                data = os.pread(fd, min(PAGE, self.floor - start), start)
                found[: len(data)] = data
            self.pages[index] = found
        return found


class LossyOps:
    """The operations (``mfusepy``'s high-level, path-based interface) over ``backing``."""

    use_ns = True

    def __init__(self, backing: str, link: str | None) -> None:
        self.backing = os.path.realpath(backing)
        self.shown_link = "/" + link if link else None
        self.mutex = threading.RLock()
        self.dirty: dict[tuple[int, int], Dirty] = {}
        self.fsyncs: dict[str, int] = {}  # path -> syncs that wrote data, for the report
        self.synced: set[tuple[int, int]] = set()  # inodes synced at least once

    # -- helpers -----------------------------------------------------------------------------
    def real(self, path: str) -> str:
        return self.backing + path

    def _guard(self, path: str) -> None:
        if self.shown_link is not None and path == self.shown_link:
            raise OSError(errno.EPERM, "the harness's folder")

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int]:
        return (st.st_dev, st.st_ino)

    def _entry(self, fd: int, path: str | None) -> Dirty:
        st = os.fstat(fd)
        key = self._key(st)
        entry = self.dirty.get(key)
        if entry is None:
            entry = self.dirty[key] = Dirty(path=path or "/(unlinked)", size=st.st_size, floor=st.st_size)
        return entry

    def _read(self, fd: int, size: int, offset: int) -> bytes:
        entry = self.dirty.get(self._key(os.fstat(fd)))
        if entry is None:
            return os.pread(fd, size, offset)
        end = min(offset + size, entry.size)
        out = bytearray()
        pos = offset
        while pos < end:
            index, at = divmod(pos, PAGE)
            take = min(PAGE - at, end - pos)
            cached = entry.pages.get(index)
            if cached is not None:
                out += cached[at : at + take]
            else:
                start = index * PAGE
                chunk = bytearray(PAGE)
                if start < entry.floor:
                    data = os.pread(fd, min(PAGE, entry.floor - start), start)
                    chunk[: len(data)] = data
                out += chunk[at : at + take]
            pos += take
        return bytes(out)

    def _write(self, fd: int, path: str | None, data: bytes, offset: int) -> int:
        entry = self._entry(fd, path)
        pos, done = offset, 0
        while done < len(data):
            index, at = divmod(pos, PAGE)
            take = min(PAGE - at, len(data) - done)
            entry.page(index, fd)[at : at + take] = data[done : done + take]
            pos += take
            done += take
        entry.size = max(entry.size, offset + len(data))
        entry.written += len(data)
        return len(data)

    def _truncate(self, fd: int, path: str | None, length: int) -> None:
        entry = self._entry(fd, path)
        if length < entry.size:
            index, at = divmod(length, PAGE)
            if at:
                entry.page(index, fd)[at:] = bytes(PAGE - at)
                index += 1
            for i in [i for i in entry.pages if i >= index]:
                del entry.pages[i]
            entry.floor = min(entry.floor, length)
        entry.size = length
        entry.written += 1

    @staticmethod
    def _write_back(entry: Dirty, out: int) -> None:
        os.ftruncate(out, entry.floor)  # what a truncate voided reads as zeros
        for index, page in sorted(entry.pages.items()):
            start = index * PAGE
            if start < entry.size:
                os.pwrite(out, bytes(page[: entry.size - start]), start)
        os.ftruncate(out, entry.size)

    def _sync(self, fd: int) -> None:
        key = self._key(os.fstat(fd))
        entry = self.dirty.pop(key, None)
        if entry is not None:
            out = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
            try:
                self._write_back(entry, out)
                os.fsync(out)
            finally:
                os.close(out)
            self.fsyncs[entry.path] = self.fsyncs.get(entry.path, 0) + 1
            self.synced.add(key)
        else:
            os.fsync(fd)

    def flush_all(self) -> None:
        """Write every cached file back (no crash came: the case's files as its processes left
        them, for its evidence)."""
        for key, entry in list(self.dirty.items()):
            try:
                out = os.open(self.real(entry.path), os.O_WRONLY | os.O_NOFOLLOW)
            except OSError:
                continue  # unlinked since
            try:
                if self._key(os.fstat(out)) == key:
                    self._write_back(entry, out)
                    del self.dirty[key]
            finally:
                os.close(out)

    def report(self) -> dict[str, Any]:
        """What a crash now drops: per file, the size processes saw and the size that survives."""
        dropped = []
        for key, entry in sorted(self.dirty.items(), key=lambda kv: kv[1].path):
            try:
                st = os.lstat(self.real(entry.path))
            except OSError:
                continue  # unlinked since: nothing of it survives anyway
            if self._key(st) != key:
                continue
            kept = st.st_size
            dropped.append(
                {
                    "path": entry.path.lstrip("/"),
                    "size_seen": entry.size,
                    "size_kept": kept,
                    "unsynced_bytes": entry.written,
                    "ever_synced": key in self.synced,
                }
            )
        return {"dropped": dropped, "fsyncs": dict(sorted(self.fsyncs.items()))}

    def init(self, path: str) -> None:
        """The kernel's first request on a new mount: it is in place (the harness waits for it)."""
        sys.stdout.write("mounted\n")
        sys.stdout.flush()

    # -- metadata: applied at once ---------------------------------------------------------
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self.mutex:
            if self.shown_link is not None and path == self.shown_link:
                target = self.readlink(path)
                st = os.lstat(self.real(path))
                attrs = _attrs(st)
                attrs.update(st_mode=stat.S_IFLNK | 0o777, st_size=len(target), st_nlink=1)
                return attrs
            if fh is None and path is None:
                raise OSError(errno.ENOENT, "")
            st = os.fstat(fh) if fh is not None else os.lstat(self.real(path or "/"))
            attrs = _attrs(st)
            entry = self.dirty.get(self._key(st)) if stat.S_ISREG(st.st_mode) else None
            if entry is not None:
                attrs["st_size"] = entry.size
                attrs["st_blocks"] = (entry.size + 511) // 512
            return attrs

    def readlink(self, path: str) -> str:
        if self.shown_link is not None and path == self.shown_link:
            return self.real(path)
        return os.readlink(self.real(path))

    def access(self, path: str, amode: int) -> int:
        if not os.access(self.real(path), amode, follow_symlinks=False):
            raise OSError(errno.EACCES, "")
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self.real(path))]

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.real(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag")
        return {k: getattr(sv, k) for k in (*keys, "f_frsize", "f_namemax")}

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self.real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        self._guard(path)
        os.rmdir(self.real(path))
        return 0

    def unlink(self, path: str) -> int:
        self._guard(path)
        with self.mutex:
            st = os.lstat(self.real(path))
            os.unlink(self.real(path))
            if st.st_nlink <= 1:  # its last name: what it held is gone whatever is synced
                self.dirty.pop(self._key(st), None)
        return 0

    def rename(self, old: str, new: str) -> int:
        self._guard(old)
        self._guard(new)
        with self.mutex:
            st = os.lstat(self.real(old))
            os.rename(self.real(old), self.real(new))
            entry = self.dirty.get(self._key(st))
            if entry is not None:
                entry.path = new
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self.real(source), self.real(target))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self.real(target))
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self.real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self.real(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self.real(path), follow_symlinks=False)
        else:
            os.utime(self.real(path), ns=times, follow_symlinks=False)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        fd = os.open(self.real(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return 0

    # -- files: data cached until fsync ----------------------------------------------------
    def _open(self, path: str, flags: int, mode: int | None = None) -> int:
        kept = flags & ~(os.O_TRUNC | os.O_APPEND | os.O_CREAT | os.O_EXCL)
        if mode is not None:
            with self.mutex:
                fd = os.open(self.real(path), kept | os.O_CREAT | os.O_EXCL, mode)
                self.dirty.pop(self._key(os.fstat(fd)), None)  # a reused inode starts clean
                self.synced.discard(self._key(os.fstat(fd)))
                return fd
        fd = os.open(self.real(path), kept)
        if flags & os.O_TRUNC:
            with self.mutex:
                self._truncate(fd, path, 0)
        return fd

    def open(self, path: str, flags: int) -> int:
        return self._open(path, flags)

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        return self._open(path, flags, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            return self._read(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            return self._write(fh, path, bytes(data), offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self.mutex:
            if fh is not None:
                self._truncate(fh, path, length)
                return 0
            if path is None:
                raise OSError(errno.EBADF, "no file")
            fd = os.open(self.real(path), os.O_RDONLY)
            try:
                self._truncate(fd, path, length)
            finally:
                os.close(fd)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            self._sync(fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # a close is no sync

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0


class Session:
    """The mounts of one file system process: the harness's commands, and a crash's restart
    (a new mount, a new empty cache, in this same process: no interpreter to start again)."""

    def __init__(self, backing: str, mountpoint: str, link: str | None) -> None:
        self.backing, self.mountpoint, self.link = backing, mountpoint, link
        self.ops = LossyOps(backing, link)
        self.restart = threading.Event()

    def say(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def unmount(self) -> None:
        subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True, check=False)

    def control(self) -> None:
        """``flush``: write every cached file back; ``crash``: say what is dropped, drop it and
        mount again (``mounted`` once back); end of input (the harness is gone): unmount, exit."""
        for line in sys.stdin:
            command = line.strip()
            if command == "flush":
                with self.ops.mutex:
                    self.ops.flush_all()
                    self.say("flushed")
            elif command == "crash":
                with self.ops.mutex:  # no operation in flight: the report is what is dropped
                    self.say(json.dumps(self.ops.report()))
                    self.ops.dirty.clear()  # the power is gone: nothing of it reaches the backing
                    self.restart.set()
                self.unmount()
        self.unmount()
        os._exit(0)

    def run(self) -> None:
        import mfusepy

        threading.Thread(target=self.control, daemon=True).start()
        while True:
            mfusepy.FUSE(
                self.ops,
                self.mountpoint,
                foreground=True,
                nothreads=False,
                fsname="killdrill-lossy",
                auto_unmount=True,
                hard_remove=True,  # an unlinked open file goes at once (no .fuse_hidden files left)
            )
            if not self.restart.is_set():
                os._exit(0)
            self.restart.clear()
            self.ops = LossyOps(self.backing, self.link)  # a fresh cache: the machine came back


def main() -> None:
    """Ready first (``mfusepy`` imported: a spare process mounts at once when asked), then one
    line on stdin says what to mount: ``{"backing", "mountpoint", "link", "log"}`` (``link``: a
    name shown as a symlink to the backing's own; ``log``: where this process's stderr goes)."""
    import mfusepy  # noqa: F401 (imported before the order: what the spare is for)

    line = sys.stdin.readline()
    if not line:  # the harness is gone before it needed this spare
        os._exit(0)
    order = json.loads(line)
    if order.get("log"):
        fd = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    Session(order["backing"], order["mountpoint"], order.get("link")).run()


if __name__ == "__main__":
    main()
