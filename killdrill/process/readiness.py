"""Is a service ready?  ``tcp:PORT`` (the port accepts on 127.0.0.1), ``http://URL`` (it answers
200-399, as a Kubernetes HTTP probe counts), ``log:TEXT`` (its stdout or stderr holds TEXT:
servers and task workers commonly log to stderr).  Each try is short: the supervisor's loop runs it,
and an ``http://`` probe's request is never waited on (its answer is read by a later try)."""

from __future__ import annotations

import codecs
import contextlib
import errno
import socket
import time
import urllib.error
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from killdrill.isolation import loopback_error, open_url

_PROBE_S = 0.2
_KNOCK_S = 2.0  # an HTTP request unanswered this long is dropped, and the next try sends another


def ready(spec: str, stdout_path: str, stderr_path: str) -> bool:
    """Does the service with these log files pass the readiness ``spec``?  One try, waiting for
    an ``http://`` answer up to a moment (for callers without a loop to watch it)."""
    import select

    probe = Probe(spec, stdout_path, stderr_path)
    try:
        passed = probe()
        if not passed and probe.knock is not None:
            select.select([probe.knock.sock], [], [], _PROBE_S)
            passed = probe()
        return passed
    finally:
        probe.close()


class Probe:
    """One launch's readiness probe, tried as often as its caller likes (on a timer, at each write
    to its files): once passed it stays passed, and a ``log:`` probe reads only what the files
    gained since its last try, never a whole log again.

    A loopback ``http://`` probe sends its request and returns: a service whose port accepts but
    does not answer yet (a chatty one, tried at each of its writes) costs each try a
    ``recv`` that finds nothing, not a wait.  ``watch(fd)`` is told the socket of a request in
    flight (the caller wakes a try when it is readable: the answer is read as it comes) and
    ``unwatch(fd)`` before that socket closes."""

    def __init__(
        self,
        spec: str,
        stdout_path: str,
        stderr_path: str,
        *,
        watch: Callable[[int], None] | None = None,
        unwatch: Callable[[int], None] | None = None,
    ) -> None:
        if not spec.startswith(("tcp:", "http://", "https://", "log:")):
            raise ValueError(f"unknown readiness probe {spec!r}")
        self.spec = spec
        self.text = spec[4:].encode() if spec.startswith("log:") else b""
        self.logs = [Appended(p) for p in (stdout_path, stderr_path)] if spec.startswith("log:") else []
        self.carry = [b"", b""]  # each log's last bytes, a line split between two reads
        self.passed = False
        self.knock: Knock | None = None  # an http:// request in flight
        self.watch, self.unwatch = watch, unwatch

    def __call__(self) -> bool:
        if not self.passed:
            if self.spec.startswith("tcp:"):
                self.passed = accepts(int(self.spec[4:]))
            elif self.logs:
                self.passed = any(self._holds(i) for i in range(len(self.logs)))
            elif self.spec.startswith("http://") and probed_port(self.spec) is not None:
                self.passed = self._knocked()
            else:
                self.passed = _answers(self.spec)  # https: a blocking try, bounded by _PROBE_S
        return self.passed

    def _knocked(self) -> bool:
        """Send a request if none is in flight; read its answer if it came: 200-399 passes."""
        if self.knock is None:
            try:
                self.knock = Knock(self.spec)
            except OSError:  # refused: nothing listens yet
                return False
            if self.watch is not None:
                self.watch(self.knock.sock.fileno())
        try:
            status = self.knock.status()
        except OSError:
            status = 0  # closed or reset without an answer, or not HTTP
        if status is None and time.monotonic() - self.knock.started < _KNOCK_S:
            return False
        self.close()
        return status is not None and 200 <= status < 400

    def close(self) -> None:
        """Drop the request in flight, if any (unwatched first, then its socket closed)."""
        if self.knock is not None:
            if self.unwatch is not None:
                self.unwatch(self.knock.sock.fileno())
            self.knock.sock.close()
            self.knock = None

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


class Knock:
    """One ``GET`` of a loopback URL on a non-blocking socket: sent when the connection is up,
    its status line read when it comes; neither is waited for."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        host = "127.0.0.1" if host in ("localhost", "0.0.0.0") else host
        port = parts.port or 80
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.started = time.monotonic()
        err = self.sock.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            self.sock.close()
            raise OSError(err, errno.errorcode.get(err, str(err)))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.request = (
            f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: killdrill-readiness\r\n"
            "Accept: */*\r\nConnection: close\r\n\r\n"
        ).encode()
        self.answer = b""

    def status(self) -> int | None:
        """The answer's status code, or None while it has not come; ``OSError`` when the
        connection failed, closed without one, or did not answer HTTP."""
        if self.request:
            try:
                self.request = self.request[self.sock.send(self.request) :]
            except BlockingIOError:  # still connecting
                return None
            if self.request:
                return None
        try:
            data = self.sock.recv(512)
        except BlockingIOError:
            return None
        if not data:
            raise ConnectionError("closed without an answer")
        self.answer += data
        line, newline, _ = self.answer.partition(b"\r\n")
        if not newline:
            if len(self.answer) > 512:
                raise ConnectionError("not an HTTP answer")
            return None  # the status line split between two reads
        words = line.split()
        if len(words) >= 2 and words[0].startswith(b"HTTP/") and words[1].isdigit():
            return int(words[1])
        raise ConnectionError("not an HTTP answer")


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
    return _tree(pid).listening


def busy_listening(pid: int) -> tuple[set[int], float]:
    """:func:`listening`, and the CPU seconds the tree's processes used so far (a server still
    starting is busy: it may open another port first, a broker its cluster port)."""
    tree = _tree(pid)
    return tree.listening, tree.cpu


def connected_to(pid: int, ports: set[int]) -> bool:
    """Does the process ``pid`` or a descendant hold a TCP connection to one of ``ports`` on this
    machine (a service's client of a dependency about to be killed)?"""
    return bool(_tree(pid).connected & ports)


@dataclass
class _Sockets:
    """What a process tree holds: the ports it listens on, the loopback ports it is connected to,
    and its CPU seconds so far."""

    listening: set[int] = field(default_factory=set)
    connected: set[int] = field(default_factory=set)
    cpu: float = 0.0


def _tree(pid: int) -> _Sockets:
    import psutil  # a dependency; imported only while a service is being waited for

    out = _Sockets()
    try:
        top = psutil.Process(pid)
        procs = [top, *top.children(recursive=True)]
    except psutil.Error:
        return out
    for proc in procs:
        try:
            read = proc.net_connections if hasattr(proc, "net_connections") else proc.connections
            conns = read(kind="tcp")
            times = proc.cpu_times()
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr:
                out.listening.add(c.laddr.port)
            elif c.raddr and c.raddr.ip in ("127.0.0.1", "::1"):
                out.connected.add(c.raddr.port)
        out.cpu += times.user + times.system
    return out
