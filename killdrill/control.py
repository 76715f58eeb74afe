"""The control channel, supervisor side: a private Unix socket per attempt.

The agent connects (one connection per thread and per process), says hello with the
attempt's token, then sends one JSON line per boundary and waits for ``{"go": true}``.
The supervisor withholds the answer to hold the agent, and never sends it when it
kills: that is what makes a kill land exactly at a point.

Privacy: the socket lives in a 0700 directory inside the case's workdir when the
path fits (Unix socket paths are limited to ~108 bytes); otherwise, on Linux, in the
abstract namespace under a random name.  Either way a peer must present the
attempt's random token; a peer that does not, or that sends garbage, is answered
with an error, disconnected and reported — never a harness crash or a hang.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import socket
import struct
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

_POINT_RE = re.compile(r"^(before|after|committed|during):[A-Za-z0-9_][A-Za-z0-9_.\-/\[\]]*$")
_MAX_LINE = 64 * 1024
_SO_PEERCRED = getattr(socket, "SO_PEERCRED", 17)


@dataclass
class Connection:
    """One agent-side connection: its socket, read buffer, peer pid and hello state."""

    sock: socket.socket
    peer_pid: int
    buffer: bytes = b""
    hello: bool = False
    thread: str = ""
    waiting: str | None = None  # the point whose answer is pending (held or being killed)


@dataclass(frozen=True)
class BoundaryMessage:
    conn: Connection
    point: str


@dataclass(frozen=True)
class ProtocolError:
    """Something on the channel that a well-behaved agent never sends."""

    conn: Connection
    message: str
    fatal: bool  # True when it came from the attempt's own (authenticated) process tree


@dataclass
class ControlListener:
    """Listens for one attempt's agent connections and turns bytes into messages.

    Sockets are registered in the supervisor's selector with ``(listener, connection)``
    as data (``connection`` None for the listening socket).
    """

    directory: str
    selector: selectors.BaseSelector
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    address: str = ""
    sock: socket.socket | None = None
    connections: dict[int, Connection] = field(default_factory=dict)
    _tmpdir: str | None = None

    def open(self) -> ControlListener:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        path = os.path.join(self.directory, f"ctl-{self.token[:8]}.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if len(path.encode()) <= 100:
            self.address = path
            sock.bind(path)
        elif sys.platform.startswith("linux"):
            name = f"killdrill-{self.token}"
            self.address = "@" + name
            sock.bind("\0" + name)
        else:  # a short private directory elsewhere, removed on close
            self._tmpdir = tempfile.mkdtemp(prefix="kd-")
            self.address = os.path.join(self._tmpdir, "ctl.sock")
            sock.bind(self.address)
        sock.listen(64)
        sock.setblocking(False)
        self.sock = sock
        self.selector.register(sock, selectors.EVENT_READ, (self, None))
        return self

    def accept(self) -> Connection | None:
        assert self.sock is not None
        try:
            conn_sock, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return None
        conn_sock.setblocking(False)
        try:
            creds = conn_sock.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, struct.calcsize("3i"))
            peer_pid = struct.unpack("3i", creds)[0]
        except OSError:
            peer_pid = 0
        conn = Connection(sock=conn_sock, peer_pid=peer_pid)
        self.connections[id(conn)] = conn
        self.selector.register(conn_sock, selectors.EVENT_READ, (self, conn))
        return conn

    def read(self, conn: Connection) -> Iterator[BoundaryMessage | ProtocolError]:
        """Read what is available on ``conn``; yield complete messages.  EOF closes it."""
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close_connection(conn)
            return
        conn.buffer += data
        while b"\n" in conn.buffer:
            line, conn.buffer = conn.buffer.split(b"\n", 1)
            msg = self._parse(conn, line)
            if msg is not None:
                yield msg
                if isinstance(msg, ProtocolError):
                    return
        if len(conn.buffer) > _MAX_LINE:
            yield self._reject(conn, f"a control message longer than {_MAX_LINE} bytes", fatal=conn.hello)

    def _parse(self, conn: Connection, line: bytes) -> BoundaryMessage | ProtocolError | None:
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise ValueError("not an object")
        except ValueError:
            return self._reject(conn, f"malformed control message {line[:80]!r}", fatal=conn.hello)
        if not conn.hello:
            if msg.get("token") != self.token:
                return self._reject(
                    conn, f"a connection from pid {conn.peer_pid} without the attempt's token", fatal=False
                )
            conn.hello = True
            conn.thread = str(msg.get("thread", ""))
            return None
        point = msg.get("point")
        if not isinstance(point, str) or not _POINT_RE.match(point):
            return self._reject(conn, f"invalid boundary name {point!r} (expected KIND:NAME)", fatal=True)
        conn.waiting = point
        return BoundaryMessage(conn, point)

    def _reject(self, conn: Connection, message: str, *, fatal: bool) -> ProtocolError:
        try:
            conn.sock.sendall(json.dumps({"error": message}).encode() + b"\n")
        except OSError:
            pass
        self.close_connection(conn)
        return ProtocolError(conn, message, fatal)

    @staticmethod
    def release(conn: Connection) -> None:
        """Answer the pending boundary: the agent goes on."""
        conn.waiting = None
        try:
            conn.sock.sendall(b'{"go": true}\n')
        except OSError:
            pass  # the peer is gone; its exit is seen through the process, not here

    def close_connection(self, conn: Connection) -> None:
        if self.connections.pop(id(conn), None) is None:
            return
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def close_all_connections(self) -> None:
        for conn in list(self.connections.values()):
            self.close_connection(conn)
        self.connections.clear()

    def close(self) -> None:
        self.close_all_connections()
        if self.sock is not None:
            try:
                self.selector.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            self.sock.close()
            self.sock = None
        if self.address and not self.address.startswith("@"):
            try:
                os.unlink(self.address)
            except OSError:
                pass
        if self._tmpdir:
            try:
                os.rmdir(self._tmpdir)
            except OSError:
                pass
