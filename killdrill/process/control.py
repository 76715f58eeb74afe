"""The control channel, supervisor side: a private Unix socket per attempt.

The agent connects (one connection per thread and per process), says hello with the
attempt's token, then sends one JSON line per boundary and waits for ``{"go": true}``.
The supervisor withholds the answer to hold the agent, and never sends it when it
kills: that is what makes a kill land exactly at a point.  At the points
``KILLDRILL_WAIT_AT`` leaves out (every point of an attempt the supervisor acts on at none), the
agent sends ``{"point": P, "wait": false, "at": T}`` (``T`` its ``time.monotonic()``) and runs
on: no answer is owed, and what such a connection still holds when the attempt's processes have
exited is read then (``drain``), so a clean run's trace loses nothing.

Who may speak, in three layers, because a forged ``during:`` point turns a real double
charge into a pass:

- the address: a socket file in the case's own 0700 directory, so other users cannot even
  connect.  When its path passes the ~108-byte limit of Unix socket paths (a pytest basetemp
  does, for every attempt), it is named through the harness's descriptor of that directory,
  ``/proc/PID/fd/N/NAME``, which only our uid may follow; without ``/proc``, a short private
  ``mkdtemp`` directory; the abstract namespace (anyone can connect) only as a last resort,
  under a random name.  No name ever contains the token: ``/proc/net/unix`` is world-readable.
- the peer's credentials (``SO_PEERCRED``): our uid, and a pid in the attempt's process tree
  (or the harness itself, whose HTTP fakes announce ``during:``).  Strangers are closed at once
  and counted, never a failure of the case: another user must not be able to fail a drill.
- the token, in the hello.

Every input is bounded: a line is at most ``MAX_LINE`` bytes, a connection has at most one
request in flight (pipelining is the agent's protocol error; one-way messages are not requests),
an attempt at most ``MAX_CONNECTIONS`` connections (and ``supervisor.MAX_POINTS`` points), and
nested JSON is a malformed message, not a traceback.
"""

from __future__ import annotations

import errno
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
MAX_LINE = 4096
"""Longest control message, in bytes: a hello or a boundary name, with room to spare."""
MAX_CONNECTIONS = 256
"""Connections one attempt may hold at once (one per agent thread and process); fewer when the
harness's own descriptor limit is low (a quarter of it), so a flood cannot exhaust the harness."""
_MAX_UNIX_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS; keep a margin
_SO_PEERCRED = getattr(socket, "SO_PEERCRED", 17)
_MAX_STRANGER_NOTES = 5


def peer_credentials(sock: socket.socket) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process that connected ``sock``, or None where the OS cannot say."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc`` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
    try:
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (ValueError, IndexError):
        return None


def in_process_tree(pid: int, root: int) -> bool:
    """True when ``pid`` is ``root`` or one of its descendants (by walking up the parents)."""
    for _ in range(4096):  # pid chains are short; a bound guards against a /proc race loop
        if pid == root:
            return True
        if pid <= 1:
            return False
        parent = parent_pid(pid)
        if parent is None:
            return False
        pid = parent
    return False


def _connection_limit() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, soft // 4))


def _private_dir_candidates() -> list[str]:
    return [d for d in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp") if d]


def _bind_by_descriptor(sock: socket.socket, directory: str, name: str) -> tuple[str, int] | None:
    """Bind ``sock`` to ``directory/name`` named as ``/proc/PID/fd/N/name`` (N: a descriptor of
    ``directory`` this process keeps open; the caller closes it after unlinking the socket): a
    path too long for a socket, still in the case's own folder, ~45 bytes however deep it is.
    Any process of our uid can follow the link (agents connect to the address as it is given);
    another user cannot even list ``/proc/PID/fd``.  None without ``/proc`` (not Linux): the
    caller falls back to a short directory elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    address = f"/proc/{os.getpid()}/fd/{fd}/{name}"
    try:
        if len(address.encode()) > _MAX_UNIX_PATH:
            raise OSError(errno.ENAMETOOLONG, address)
        sock.bind(address)
    except OSError:
        os.close(fd)
        return None
    return address, fd


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
    waits: bool = True  # False: a one-way message, no answer owed
    at: float | None = None  # a one-way message's time, on the agent's monotonic clock


@dataclass(frozen=True)
class ProtocolViolation:
    """Something on the channel that a well-behaved agent never sends."""

    conn: Connection
    message: str
    fatal: bool  # True when it came from the attempt's own (authenticated) process tree


@dataclass
class ControlListener:
    """Listens for one attempt's agent connections and turns bytes into messages.

    Sockets are registered in the supervisor's selector with ``(listener, connection)``
    as data (``connection`` None for the listening socket).  Call :meth:`attach` with the
    attempt's pid once it runs: from then on only its process tree (and the harness) is heard.
    """

    directory: str
    selector: selectors.BaseSelector
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    address: str = ""
    sock: socket.socket | None = None
    connections: dict[int, Connection] = field(default_factory=dict)
    root_pid: int | None = None
    ignored: int = 0
    ignored_why: dict[str, int] = field(default_factory=dict)
    max_connections: int = field(default_factory=lambda: _connection_limit())
    _tmpdir: str | None = None
    _dir_fd: int | None = None  # the directory's descriptor a /proc/PID/fd/N address goes through
    _paused: bool = False

    def open(self) -> ControlListener:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        name = f"ctl-{secrets.token_hex(6)}.sock"  # random, unrelated to the token
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.address = self._bind(sock, name)
            sock.listen(64)
        except OSError:
            sock.close()
            self._release_directory()
            raise
        sock.setblocking(False)
        self.sock = sock
        self.selector.register(sock, selectors.EVENT_READ, (self, None))
        return self

    def _bind(self, sock: socket.socket, name: str) -> str:
        path = os.path.join(self.directory, name)
        if len(path.encode()) <= _MAX_UNIX_PATH:
            sock.bind(path)
            return path
        bound = _bind_by_descriptor(sock, self.directory, name)
        if bound is not None:
            path, self._dir_fd = bound
            return path
        for base in _private_dir_candidates():
            if len(os.path.join(base, "kd-XXXXXXXX", name).encode()) > _MAX_UNIX_PATH:
                continue
            try:
                self._tmpdir = tempfile.mkdtemp(prefix="kd-", dir=base)  # 0700, ours alone
            except OSError:
                continue
            path = os.path.join(self._tmpdir, name)
            sock.bind(path)
            return path
        if not sys.platform.startswith("linux"):
            raise OSError(errno.ENAMETOOLONG, f"no short private directory for the control socket {path}")
        abstract = f"killdrill-{secrets.token_hex(16)}"  # anyone may connect: the peer checks decide
        sock.bind("\0" + abstract)
        return "@" + abstract

    def attach(self, pid: int) -> None:
        """The attempt runs as ``pid``: from now on, hear only its process tree and the harness."""
        self.root_pid = pid

    def _is_member(self, pid: int, uid: int) -> bool:
        if uid != os.geteuid():
            return False
        if self.root_pid is None or pid == os.getpid():
            return True
        return in_process_tree(pid, self.root_pid)

    def _ignore(self, why: str) -> None:
        self.ignored += 1
        if why in self.ignored_why or len(self.ignored_why) < _MAX_STRANGER_NOTES:
            self.ignored_why[why] = self.ignored_why.get(why, 0) + 1

    def accept(self) -> Connection | None:
        """Accept one pending connection (None when there is none to accept now).

        A stranger is closed at once and counted; past ``MAX_CONNECTIONS`` a connection is
        closed unheard; when the harness is out of descriptors, accepting pauses until one closes.
        """
        assert self.sock is not None
        while True:
            try:
                conn_sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause()
                return None
            creds = peer_credentials(conn_sock)
            if creds is not None and not self._is_member(*creds):
                conn_sock.close()
                self._ignore(f"a connection from pid {creds[0]} (uid {creds[1]}) outside the attempt")
                continue
            if len(self.connections) >= self.max_connections:
                conn_sock.close()
                self._ignore(f"a connection past the limit of {self.max_connections}")
                continue
            conn_sock.setblocking(False)
            conn = Connection(sock=conn_sock, peer_pid=creds[0] if creds else 0)
            self.connections[id(conn)] = conn
            self.selector.register(conn_sock, selectors.EVENT_READ, (self, conn))
            return conn

    def _pause(self) -> None:
        if self.sock is not None and not self._paused:
            self._paused = True
            try:
                self.selector.unregister(self.sock)
            except (KeyError, ValueError):
                pass

    def _resume(self) -> None:
        if self.sock is not None and self._paused:
            self._paused = False
            self.selector.register(self.sock, selectors.EVENT_READ, (self, None))

    def read(self, conn: Connection) -> Iterator[BoundaryMessage | ProtocolViolation]:
        """Read what is available on ``conn``; yield complete messages.  EOF closes it.

        One request at a time: a line that arrives while the answer to the previous boundary
        is still owed (or after a waiting boundary in one read) is pipelining, a protocol error.
        """
        data = self._recv(conn)
        if data:
            yield from self._lines(conn, data)

    def drain(self) -> Iterator[BoundaryMessage]:
        """The one-way messages the connections hold now: read once the attempt's processes have
        exited or been sent SIGKILL (what they had sent is where they were); a waiting message
        left unanswered is not one."""
        for conn in list(self.connections.values()):
            while id(conn) in self.connections:
                data = self._recv(conn)
                if data is None:
                    break
                for msg in self._lines(conn, data):
                    if isinstance(msg, BoundaryMessage) and not msg.waits:
                        yield msg

    def _recv(self, conn: Connection) -> bytes | None:
        """What ``conn`` has now (None: nothing yet); at EOF it is closed and b"" returned."""
        try:
            data = conn.sock.recv(MAX_LINE + 1)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        if not data:
            self.close_connection(conn)
        return data

    def _lines(self, conn: Connection, data: bytes) -> Iterator[BoundaryMessage | ProtocolViolation]:
        conn.buffer += data
        waited = False
        while b"\n" in conn.buffer:
            line, conn.buffer = conn.buffer.split(b"\n", 1)
            msg: BoundaryMessage | ProtocolViolation | None
            if conn.waiting is not None or waited:
                msg = self._reject(conn, "a control message sent before the answer to the previous one")
            else:
                msg = self._parse(conn, line)
            if msg is None:
                continue
            if isinstance(msg, ProtocolViolation):
                if msg.fatal:  # a stranger's junk is counted in ``ignored``, never the case's failure
                    yield msg
                return
            waited = msg.waits
            yield msg
            if conn.sock.fileno() < 0:  # closed while the message was handled (a kill)
                return
        if len(conn.buffer) > MAX_LINE:
            error = self._reject(conn, f"a control message longer than {MAX_LINE} bytes")
            if error.fatal:
                yield error

    def _parse(self, conn: Connection, line: bytes) -> BoundaryMessage | ProtocolViolation | None:
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError):
            return self._reject(conn, f"malformed control message {line[:80]!r}")
        if not conn.hello:
            token = msg.get("token")
            if not isinstance(token, str) or not secrets.compare_digest(token.encode(), self.token.encode()):
                return self._reject(conn, f"a peer (pid {conn.peer_pid}) without the attempt's token")
            conn.hello = True
            conn.thread = str(msg.get("thread", ""))[:200]
            return None
        point = msg.get("point")
        if not isinstance(point, str) or not _POINT_RE.match(point):
            return self._reject(conn, f"invalid boundary name {str(point)[:80]!r} (expected KIND:NAME)")
        if msg.get("wait", True) is False:
            at = msg.get("at")
            return BoundaryMessage(conn, point, waits=False, at=at if isinstance(at, float) else None)
        conn.waiting = point
        return BoundaryMessage(conn, point)

    def _reject(self, conn: Connection, message: str) -> ProtocolViolation:
        """Answer with an error and hang up.  Fatal to the case only once the peer said hello:
        before that it may be anyone of our uid (a stranger is never the agent's fault)."""
        fatal = conn.hello
        try:
            conn.sock.send(json.dumps({"error": message}).encode() + b"\n")
        except OSError:
            pass
        self.close_connection(conn)
        if not fatal:
            self._ignore(message)
        return ProtocolViolation(conn, message, fatal)

    def release(self, conn: Connection) -> None:
        """Answer the pending boundary: the agent goes on.

        At most one answer is ever owed on a connection, so the socket buffer cannot be full;
        a send that would block means a peer that does not read its answers: hang up.
        """
        conn.waiting = None
        try:
            conn.sock.send(b'{"go": true}\n')
        except BlockingIOError:
            self.close_connection(conn)
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
        self._resume()

    def close_all_connections(self) -> None:
        for conn in list(self.connections.values()):
            self.close_connection(conn)
        self.connections.clear()

    def close(self) -> None:
        self.close_all_connections()
        if self.sock is not None:
            if not self._paused:
                try:
                    self.selector.unregister(self.sock)
                except (KeyError, ValueError):
                    pass
            self._paused = False
            self.sock.close()
            self.sock = None
        if self.address and not self.address.startswith("@"):
            try:
                os.unlink(self.address)
            except OSError:
                pass
        self._release_directory()  # after the unlink, which may go through its descriptor

    def _release_directory(self) -> None:
        """Close the descriptor the address went through, or remove the short folder it was in."""
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        if self._tmpdir:
            try:
                os.rmdir(self._tmpdir)
            except OSError:
                pass
            self._tmpdir = None

    def stranger_note(self) -> str | None:
        """One line about the connections that were ignored, for the attempt's notes."""
        if not self.ignored:
            return None
        reasons = "; ".join(f"{why} (x{n})" if n > 1 else why for why, n in self.ignored_why.items())
        return f"ignored {self.ignored} control connection(s): {reasons}"
