"""Who owns what a drill made outside its own process, so a harness that dies leaves nothing.

A harness (a CLI run, a pytest process, a chaos worker) that makes something that outlives a
process (a folder, a Redis key prefix, a RabbitMQ virtual host, a PostgreSQL schema) first
writes a *claim* for it in its record, one JSON line, and a *release* once it removed it.  The
record is a file of its own in a per-user folder of the system's temporary directory, held
under an exclusive ``flock`` for the harness's whole life: the kernel drops that lock when the
process ends, however it ends (SIGKILL included), so "the owner is gone" is a fact, never a
guess from a pid that may be reused.

The next harness on the machine :func:`dead_claims` what no living owner holds (it takes each
dead record's lock first: two sweepers never sweep one record) and removes it with the removers
of the kinds (``drill.sweep``); a record whose claims are all removed is deleted.  A made root
that a drill keeps on purpose (the evidence of a failure it printed) is handed from the owner to
the *kept* roots (marked with :data:`KEPT_MARK`), which have a bound (:data:`KEEP_LIMIT`, oldest
removed first) and ``killdrill clean`` to clear them.

Bottom layer: standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FOLDER",
    "FUSE_MOUNT",
    "KEEP_LIMIT",
    "POSTGRES_SCHEMA",
    "RABBITMQ_VHOST",
    "REDIS_KEYS",
    "DeadRecord",
    "claim",
    "dead_records",
    "keep",
    "kept",
    "registry_dir",
    "release",
]

FOLDER = "folder"  # {"path"}: removed whole
REDIS_KEYS = "redis-keys"  # {"url", "prefix"}: every key under the prefix deleted
RABBITMQ_VHOST = "rabbitmq-vhost"  # {"vhost"}: deleted with rabbitmqctl
POSTGRES_SCHEMA = "postgres-schema"  # {"url", "schema"}: dropped with CASCADE
FUSE_MOUNT = "fuse-mount"  # {"path"}: a lossy file system's mount, unmounted lazily (before folders)

KEEP_LIMIT = 20
"""Made roots kept as a failure's evidence; past it the oldest are removed by the next run."""


def registry_dir(create: bool = False) -> Path:
    """The per-user folder of records (``$TMPDIR/killdrill-owners-UID``, private; made by the
    first claim, removed by the last owner's clean exit)."""
    path = Path(tempfile.gettempdir()) / f"killdrill-owners-{os.getuid()}"
    if create:
        path.mkdir(mode=0o700, exist_ok=True)
    return path


class _Record:
    """This process's record: opened (and locked) on its first claim, removed at a clean exit
    once every claim was released."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._file: Any = None
        self._path: Path | None = None
        self._pid = 0
        self._exiting = False  # the exit handler ran with claims left
        self._open_claims: set[str] = set()
        self._n = 0
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        # the lock is the parent's (shared through the inherited descriptor): a child that
        # claims opens a record of its own
        self._lock = threading.Lock()
        self._file, self._path, self._pid, self._open_claims, self._n = None, None, 0, set(), 0

    def _ensure(self) -> Any:
        if self._file is None or self._pid != os.getpid():
            # locked under a name no sweeper reads, then named: a sweeper never takes a new
            # record for a dead one
            path = registry_dir(create=True) / f"{os.getpid()}-{time.monotonic_ns()}.jsonl"
            try:
                f = open(path.with_suffix(".new"), "a", encoding="utf-8")  # noqa: SIM115 (held for life)
            except FileNotFoundError:  # another process's exit removed the empty folder just now
                path = registry_dir(create=True) / path.name
                f = open(path.with_suffix(".new"), "a", encoding="utf-8")  # noqa: SIM115
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            os.rename(path.with_suffix(".new"), path)
            self._file, self._path, self._pid = f, path, os.getpid()
            import atexit

            atexit.register(self._close)
        return self._file

    def name(self) -> str | None:
        """This process's record file's name (None: no claim yet)."""
        path = self._path
        return path.name if path is not None and self._pid == os.getpid() else None

    def write(self, entry: dict[str, Any]) -> None:
        with self._lock:
            f = self._ensure()
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()

    def claim(self, kind: str, what: dict[str, Any]) -> str:
        with self._lock:
            self._n += 1
            cid = f"{os.getpid()}-{self._n}"
            self._open_claims.add(cid)
        self.write({"op": "claim", "id": cid, "kind": kind, **what})
        return cid

    def release(self, cid: str) -> None:
        with self._lock:
            if cid not in self._open_claims:
                return
            self._open_claims.discard(cid)
        self.write({"op": "release", "id": cid})
        if self._exiting:
            self._close()

    def _close(self) -> None:
        """At exit: a record whose claims were all released goes; one with claims left stays
        open and locked until the process is gone (an exit handler that runs after this one, a
        drill's finalizer handing its root to the kept list, still writes to it)."""
        with self._lock:
            f = self._file
            if f is None or self._pid != os.getpid() or self._path is None:
                return
            if self._open_claims:
                self._exiting = True  # the last release removes it
                return
            self._file = None  # a claim after this (none is expected) opens a record of its own
            with contextlib.suppress(OSError):
                os.unlink(self._path)
            with contextlib.suppress(OSError):  # nothing of killdrill's left in the temp dir
                self._path.parent.rmdir()
            f.close()


_RECORD = _Record()


def claim(kind: str, **what: Any) -> str:
    """Say this process made ``what`` (of ``kind``) before making it; the id to :func:`release`."""
    return _RECORD.claim(kind, what)


def release(cid: str) -> None:
    """``cid``'s resource is gone (or handed on): no sweeper will touch it."""
    _RECORD.release(cid)


@dataclass
class DeadRecord:
    """A record no living process holds, locked by this sweeper while it is open."""

    path: Path
    claims: list[dict[str, Any]] = field(default_factory=list)
    _file: Any = None

    def done(self, removed: list[dict[str, Any]]) -> None:
        """Delete the record if every claim was removed, else keep the rest for the next sweep."""
        left = [c for c in self.claims if c not in removed]
        if left:
            with open(self.path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(c, sort_keys=True) + "\n" for c in left)
        else:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self._file.close()


@contextlib.contextmanager
def dead_records() -> Iterator[list[DeadRecord]]:
    """The records whose owners are gone, each locked (a living owner, or another sweeper, holds
    the lock: skipped); call :meth:`DeadRecord.done` on each."""
    found: list[DeadRecord] = []
    try:
        for path in sorted(registry_dir().glob("*.jsonl")):
            if path.name == _RECORD.name():
                continue
            try:
                f = open(path, encoding="utf-8")  # noqa: SIM115 (closed by done() or below)
            except OSError:
                continue
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            found.append(DeadRecord(path, _open_claims(f.read()), f))
        yield found
    finally:
        for record in found:
            if not record._file.closed:
                record._file.close()


def _open_claims(text: str) -> list[dict[str, Any]]:
    claims: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by the kill
        if entry.get("op") == "claim":
            claims[entry["id"]] = entry
        elif entry.get("op") == "release":
            claims.pop(entry.get("id"), None)
    return list(claims.values())


KEPT_MARK = ".killdrill-kept"
"""The file a kept root holds: when it was kept (the kept list is the made roots that hold one)."""


def keep(path: Path) -> None:
    """``path`` (a made root) stays as evidence: marked, and bounded by :data:`KEEP_LIMIT`."""
    with contextlib.suppress(OSError):
        (path / KEPT_MARK).write_text(json.dumps({"at": time.time()}), encoding="utf-8")


def kept() -> list[dict[str, Any]]:
    """The kept roots in the temp dir (``path``, ``at``), oldest first."""
    out = []
    for mark in Path(tempfile.gettempdir()).glob(f"killdrill-*/{KEPT_MARK}"):
        try:
            at = float(json.loads(mark.read_text(encoding="utf-8"))["at"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append({"path": str(mark.parent), "at": at})
    return sorted(out, key=lambda e: e["at"])
