"""Remove what harnesses that are gone left behind (``killdrill.ownership`` keeps the claims).

Run once per process in the background when its first drill makes a root (every route: the
CLI, pytest, chaos), and in the foreground by ``killdrill clean``.  Each kind has one remover;
a claim whose remover fails (a broker down) stays for the next sweep.  A remover touches only
what killdrill names (folders ``killdrill-*``, ``.removing-*``, ``.killdrill-*``; keys and
vhosts ``killdrill-*``; schemas ``kd_*``): a record is the user's own file, but a sweeper
never deletes by a name it did not make.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from killdrill import ownership

_FOLDER_PREFIXES = ("killdrill-", ".removing-", ".killdrill-")


def _folder(claim: dict[str, Any]) -> None:
    path = Path(claim["path"])
    if not path.is_absolute() or not path.name.startswith(_FOLDER_PREFIXES):
        return
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise OSError(f"could not remove {path}")


def _redis_keys(claim: dict[str, Any]) -> None:
    prefix = str(claim["prefix"])
    if not prefix.startswith("killdrill-"):
        return
    import redis  # a claim of this kind was made where it is installed

    client = redis.Redis.from_url(claim["url"], socket_connect_timeout=3, socket_timeout=10)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=500))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()


def _rabbitmq_vhost(claim: dict[str, Any]) -> None:
    vhost = str(claim["vhost"])
    if not vhost.startswith("killdrill-"):
        return
    ctl = shutil.which("rabbitmqctl") or next(
        (p for p in ("/usr/sbin/rabbitmqctl", "/usr/local/sbin/rabbitmqctl") if os.access(p, os.X_OK)), None
    )
    if ctl is None:
        raise OSError("rabbitmqctl not found")
    listed = subprocess.run([ctl, "-q", "list_vhosts", "name"], capture_output=True, text=True, timeout=60)
    if listed.returncode == 0 and vhost not in listed.stdout.split():
        return
    done = subprocess.run([ctl, "-q", "delete_vhost", vhost], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise OSError(done.stderr.strip() or f"rabbitmqctl delete_vhost {vhost} failed")


def _postgres_schema(claim: dict[str, Any]) -> None:
    schema = str(claim["schema"])
    if not schema.startswith("kd_") or not schema.replace("_", "").isalnum():
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(claim["url"])
    try:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        engine.dispose()


def _fuse_mount(claim: dict[str, Any]) -> None:
    from killdrill.faults.lossy_mount import is_mounted, restore, unmount

    path = Path(claim["path"])
    if path.is_absolute():
        unmount(path)  # only a lossy file system's mount (its source name says so)
        if is_mounted(path):
            raise OSError(f"could not unmount {path}")
        backing = Path(str(claim.get("backing") or ""))
        if backing.is_absolute() and backing.name.startswith(".killdrill-lossy-"):
            restore(path, backing)  # the workdir's files back at its path


REMOVERS: dict[str, Callable[[dict[str, Any]], None]] = {
    ownership.FUSE_MOUNT: _fuse_mount,  # first: a folder holding a mount is removed after it
    ownership.FOLDER: _folder,
    ownership.REDIS_KEYS: _redis_keys,
    ownership.RABBITMQ_VHOST: _rabbitmq_vhost,
    ownership.POSTGRES_SCHEMA: _postgres_schema,
}


def sweep(keep_limit: int = ownership.KEEP_LIMIT) -> list[str]:
    """Remove every claim of a harness that is gone, and the kept roots past ``keep_limit``
    (oldest first); what was removed, one line each."""
    said: list[str] = []
    with ownership.dead_records() as records:
        for record in records:
            removed = []
            for claim in sorted(record.claims, key=_removal_order):
                remover = REMOVERS.get(str(claim.get("kind")))
                if remover is None:
                    continue
                try:
                    remover(claim)
                except Exception:
                    continue
                removed.append(claim)
                said.append(_describe(claim))
            record.done(removed)
    said += prune_kept(keep_limit)
    with contextlib.suppress(OSError):  # empty: nothing of killdrill's left in the temp dir
        ownership.registry_dir().rmdir()
    return said


def _removal_order(claim: dict[str, Any]) -> int:
    """Mounts before everything else: a folder holding a mount is removed after it."""
    return 0 if claim.get("kind") == ownership.FUSE_MOUNT else 1


def prune_kept(limit: int) -> list[str]:
    """Remove the oldest kept roots past ``limit``."""
    entries = ownership.kept()
    said = []
    for entry in entries[: max(0, len(entries) - limit)]:
        path = Path(entry["path"])
        if path.name.startswith("killdrill-"):
            shutil.rmtree(path, ignore_errors=True)
            said.append(f"kept folder {path}")
    return said


def _describe(claim: dict[str, Any]) -> str:
    kind = claim.get("kind")
    if kind == ownership.FOLDER:
        return f"folder {claim['path']}"
    if kind == ownership.REDIS_KEYS:
        return f"Redis keys {claim['prefix']}*"
    if kind == ownership.FUSE_MOUNT:
        return f"lossy mount {claim['path']}"
    if kind == ownership.RABBITMQ_VHOST:
        return f"RabbitMQ vhost {claim['vhost']}"
    return f"PostgreSQL schema {claim.get('schema')}"


_started: threading.Thread | None = None
_start_lock = threading.Lock()


def sweep_in_background() -> None:
    """Once per process: :func:`sweep` in a daemon thread (a drill never waits for it)."""
    global _started
    with _start_lock:
        if _started is not None:
            return
        _started = threading.Thread(target=_quiet_sweep, name="killdrill-sweep", daemon=True)
    with contextlib.suppress(RuntimeError):  # an interpreter shutting down
        _started.start()


def wait_for_sweep(timeout: float = 30.0) -> None:
    """Until this process's sweep is done (a drill's end: a short CLI run must not cut it)."""
    thread = _started
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
        thread.join(timeout)


def _quiet_sweep() -> None:
    with contextlib.suppress(Exception):
        sweep()
