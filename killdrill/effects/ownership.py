"""Who owns a claim (host:pid:start-time:thread) and whether that worker is still alive."""

from __future__ import annotations

import os
import socket
import threading

from killdrill import envvars

_token_cache: tuple[int, str] | None = None
_HOST = socket.gethostname()


def _process_token() -> str:
    """host:pid:start-time; the start time tells a reused pid from the original process."""
    global _token_cache
    pid = os.getpid()
    if _token_cache is None or _token_cache[0] != pid:
        import psutil

        _token_cache = (pid, f"{_HOST}:{pid}:{psutil.Process(pid).create_time():.2f}")
    return _token_cache[1]


def _owner_token() -> str:
    return f"{_process_token()}:{threading.get_ident()}"


def _owner_alive(owner: str | None) -> bool | None:
    """Is the worker that owns a claim still running?  None when it is on another host."""
    if not owner:
        return False
    try:
        host, pid_s, started, ident_s = owner.rsplit(":", 3)
        pid, ident = int(pid_s), int(ident_s)
    except ValueError:
        return None
    if host != _HOST:
        return None
    if pid == os.getpid():
        # Our own process: another thread may be working on it; this thread is not (it is here).
        if ident == threading.get_ident():
            return False
        return any(t.ident == ident for t in threading.enumerate())
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return f"{proc.create_time():.2f}" == started
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _attempt_from_env() -> int | None:
    raw = os.environ.get(envvars.ATTEMPT)
    try:
        return int(raw) if raw else None
    except ValueError:
        return None
