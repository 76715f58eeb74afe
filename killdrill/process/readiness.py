"""Is a service ready?  ``tcp:PORT`` (the port accepts on 127.0.0.1), ``http://URL`` (it answers
200-399, as a Kubernetes HTTP probe counts), ``log:TEXT`` (its stdout or stderr holds TEXT:
servers and task workers commonly log to stderr).  Each probe is short: the supervisor's loop runs it."""

from __future__ import annotations

import contextlib
import socket
import urllib.error

from killdrill.isolation import loopback_error, open_url

_PROBE_S = 0.2


def ready(spec: str, stdout_path: str, stderr_path: str) -> bool:
    """Does the service with these log files pass the readiness ``spec``?"""
    if spec.startswith("tcp:"):
        return accepts(int(spec[4:]))
    if spec.startswith(("http://", "https://")):
        return _answers(spec)
    if spec.startswith("log:"):
        return any(_holds(path, spec[4:]) for path in (stdout_path, stderr_path))
    raise ValueError(f"unknown readiness probe {spec!r}")


def check(spec: str) -> str | None:
    """Why ``spec`` is not a readiness probe, or None."""
    if spec.startswith("tcp:"):
        port = spec[4:]
        if not port.isdigit() or not 0 < int(port) < 65536:
            return f"tcp:PORT needs a port number, got {spec!r}"
        return None
    if spec.startswith(("http://", "https://")):
        return loopback_error(spec)
    if spec.startswith("log:"):
        return None
    return f"expected tcp:PORT, http://URL or log:TEXT, got {spec!r}"


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=_PROBE_S):
            return True
    except OSError:
        return False


def _answers(url: str) -> bool:
    try:
        with open_url(url, timeout=_PROBE_S) as resp:
            return 200 <= int(resp.status) < 400
    except urllib.error.HTTPError as exc:
        return 200 <= exc.code < 400
    except (OSError, ValueError):
        return False


def _holds(path: str, text: str) -> bool:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        return text.encode() in f.read()
    return False


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's pick), for a case's ``{port}``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
