"""Is a service ready?  ``tcp:PORT`` (the port accepts on 127.0.0.1), ``http://URL`` (it answers
200-399, as a Kubernetes HTTP probe counts), ``log:TEXT`` (its stdout or stderr holds TEXT:
servers and task workers commonly log to stderr).  Each probe is short: the supervisor's loop runs it."""

from __future__ import annotations

import codecs
import contextlib
import socket
import urllib.error
import urllib.parse

from killdrill.isolation import loopback_error, open_url

_PROBE_S = 0.2


def ready(spec: str, stdout_path: str, stderr_path: str) -> bool:
    """Does the service with these log files pass the readiness ``spec``?"""
    return Probe(spec, stdout_path, stderr_path)()


class Probe:
    """One launch's readiness probe, tried as often as its caller likes (on a timer, at each write
    to its files): once passed it stays passed, and a ``log:`` probe reads only what the files
    gained since its last try, never a whole log again."""

    def __init__(self, spec: str, stdout_path: str, stderr_path: str) -> None:
        if not spec.startswith(("tcp:", "http://", "https://", "log:")):
            raise ValueError(f"unknown readiness probe {spec!r}")
        self.spec = spec
        self.text = spec[4:].encode() if spec.startswith("log:") else b""
        self.logs = [Appended(p) for p in (stdout_path, stderr_path)] if spec.startswith("log:") else []
        self.carry = [b"", b""]  # each log's last bytes, a line split between two reads
        self.passed = False

    def __call__(self) -> bool:
        if not self.passed:
            if self.spec.startswith("tcp:"):
                self.passed = accepts(int(self.spec[4:]))
            elif self.logs:
                self.passed = any(self._holds(i) for i in range(len(self.logs)))
            else:
                self.passed = _answers(self.spec)
        return self.passed

    def _holds(self, i: int) -> bool:
        data = self.carry[i] + self.logs[i].read()
        keep = len(self.text) - 1
        self.carry[i] = data[-keep:] if keep > 0 else b""
        return self.text in data if self.text else self.logs[i].exists


class Appended:
    """A log file read from where the last read stopped: what its writer appended since (a file
    truncated or replaced since is read again from its start)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.exists = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                self.exists = True
                if f.seek(0, 2) < self.offset:
                    self.offset = 0
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return b""
        self.offset += len(data)
        return data

    def text(self) -> str:
        """What was appended since, decoded (a character split between two reads is whole once)."""
        return self._decoder.decode(self.read())


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


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's pick), for a case's ``{port}``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probed_port(spec: str) -> int | None:
    """The local port a ``tcp:`` or loopback ``http://`` probe knocks on, or None."""
    if spec.startswith("tcp:"):
        return int(spec[4:]) if spec[4:].isdigit() else None
    if spec.startswith(("http://", "https://")):
        url = urllib.parse.urlsplit(spec)
        if url.hostname in ("127.0.0.1", "localhost", "0.0.0.0", "::1"):
            with contextlib.suppress(ValueError):
                return url.port or (443 if url.scheme == "https" else 80)
    return None


def listening(pid: int) -> set[int]:
    """The TCP ports the process ``pid`` and its descendants listen on (empty when unknown): a
    service that is up on another port than its probe's is told at once, not after a timeout."""
    import psutil  # a dependency; imported only while a service is being waited for

    ports: set[int] = set()
    try:
        top = psutil.Process(pid)
        procs = [top, *top.children(recursive=True)]
    except psutil.Error:
        return ports
    for proc in procs:
        try:
            read = proc.net_connections if hasattr(proc, "net_connections") else proc.connections
            conns = read(kind="tcp")
        except psutil.Error:
            continue
        ports |= {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}
    return ports
