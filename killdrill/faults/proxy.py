"""A TCP fault proxy between an agent and one dependency (PostgreSQL, Redis, a broker, a runtime's
server): what Toxiproxy does for services, owned by the harness, on loopback, one per ``--proxy``.

Why not Toxiproxy itself: it is a Go server driven over its own HTTP API (a binary to install, a
process to own and sweep, an API call per fault), and it cuts by timing, byte counts or
latency: it cannot say "the server answered COMMIT and the client never heard", because it does
not read the protocol.  This proxy does (:mod:`killdrill.faults.wire_protocols`), so that moment
is a point of the grammar like a fake's ``during:``, exact whatever the load.

Each launch gets a port of its own (:meth:`FaultProxy.listen`): its connections announce on its
control channel and answer to its armed fault, however many launches run at once.  Per
connection, one thread moves whole messages both ways:

- the answer of an announced op (``commit``) is held while ``during:NAME.OP`` is announced on
  the launch's channel; the supervisor lets it go, or kills the agent (the proxy then closes the
  connection: the dependency did it, the agent never heard);
- ``drop:NAME.OP[#N][~Xs]`` (the N-th answer of OP in the attempt): the answer is held ``Xs``,
  then both sides are closed with it unsent.  The server has committed; the client sees the
  connection end under its ``COMMIT``;
- ``reset:NAME.OP[#N]`` (the N-th request of OP): the client's connection is reset (RST) with
  the request unsent and the server's closed: nothing was done (PostgreSQL rolls back);
- :meth:`cut`, :meth:`reset`, :meth:`hold`: every connection at once (a fault whose trigger is a
  point elsewhere).

Threads, not one selector loop: an announcement blocks its connection until the supervisor
answers, and must block no other.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from killdrill.agent import ControlChannelError, ControlClient
from killdrill.faults.wire_protocols import Message, Protocol, protocol

__all__ = ["Armed", "FaultProxy"]

_CONNECT_TIMEOUT_S = 10.0
_CHUNK = 65536


@dataclass
class Armed:
    """One launch's armed connection fault: the N-th request (reset) or answer (drop) of ``op``."""

    fault: str  # "drop" | "reset"
    op: str
    occurrence: int = 1
    hold_s: float = 0.0
    applied: Callable[[str], None] = lambda note: None
    seen: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, op: str | None, fault: str) -> bool:
        """Does this ``op`` (a request for reset, an answer for drop) trigger the armed fault?"""
        if op != self.op or fault != self.fault:
            return False
        with self.lock:
            self.seen += 1
            return self.seen == self.occurrence


@dataclass
class _Launch:
    """What one launch's port answers to: its channel and its armed fault."""

    server: socket.socket
    control: ControlClient | None = None
    armed: Armed | None = None


class FaultProxy:
    """The proxy of dependency ``name`` (``scheme``: its protocol) at ``upstream``."""

    def __init__(self, name: str, scheme: str, upstream: tuple[str, int]) -> None:
        protocol(scheme)  # a KeyError for an unknown scheme, now
        self.name, self.scheme, self.upstream = name, scheme, upstream
        self._lock = threading.Lock()
        self._launches: dict[Hashable, _Launch] = {}
        self._by_fd: dict[int, _Launch] = {}
        self._links: set[_Link] = set()
        self._held = threading.Event()
        self._held.set()  # set: forwarding
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._stopped = False
        self._thread = threading.Thread(target=self._accept_loop, name=f"killdrill-proxy-{name}", daemon=True)
        self._thread.start()

    # ---- launches ------------------------------------------------------------------------------
    def listen(self, launch: Hashable) -> int:
        """The port (on 127.0.0.1) of ``launch``'s connections, opened on first ask."""
        with self._lock:
            known = self._launches.get(launch)
            if known is not None:
                return int(known.server.getsockname()[1])
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", 0))
            server.listen(64)
            server.setblocking(False)
            entry = _Launch(server)
            self._launches[launch] = entry
            self._by_fd[server.fileno()] = entry
            self._selector.register(server, selectors.EVENT_READ)
        self._wake()
        return int(server.getsockname()[1])

    def bind(self, launch: Hashable, control_address: str | None, token: str | None) -> None:
        """``launch``'s announcements go to this control channel (None: announce nothing)."""
        self.listen(launch)
        control = ControlClient(control_address, token or "", persistent=False) if control_address else None
        with self._lock:
            self._launches[launch].control = control

    def arm(self, launch: Hashable, armed: Armed) -> None:
        self.listen(launch)
        with self._lock:
            self._launches[launch].armed = armed

    # ---- faults on every connection ------------------------------------------------------------
    def cut(self) -> int:
        """Close both sides of every connection now (FIN): how many were open."""
        return self._each(lambda link: link.close())

    def reset(self) -> int:
        """Reset every connection now (RST to the client, the server's closed): how many."""
        return self._each(lambda link: link.close(rst=True))

    def hold(self, seconds: float) -> None:
        """Forward nothing, either way, for ``seconds`` (connections stay open; new ones wait)."""
        self._held.clear()
        timer = threading.Timer(seconds, self._held.set)
        timer.daemon = True
        timer.start()

    def _each(self, act: Callable[[_Link], None]) -> int:
        with self._lock:
            links = list(self._links)
        for link in links:
            act(link)
        return len(links)

    # ---- the end -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop accepting, close every connection and every port."""
        with self._lock:
            self._stopped = True
            launches = list(self._launches.values())
            self._launches.clear()
            self._by_fd.clear()
        self._held.set()
        self._wake()
        self._thread.join(timeout=5.0)
        for entry in launches:
            entry.server.close()
        self._each(lambda link: link.close())
        self._wake_r.close()
        self._wake_w.close()
        self._selector.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals -----------------------------------------------------------------------------
    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _accept_loop(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
            try:
                events = self._selector.select()
            except (OSError, ValueError):
                return
            for key, _ in events:
                if key.fileobj is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                with self._lock:
                    entry = self._by_fd.get(key.fd)
                if entry is None:
                    with contextlib.suppress(KeyError, ValueError):
                        self._selector.unregister(key.fileobj)
                    continue
                try:
                    client, _ = entry.server.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    continue
                link = _Link(self, entry, client)
                with self._lock:
                    self._links.add(link)
                threading.Thread(
                    target=link.run, name=f"killdrill-proxy-{self.name}-link", daemon=True
                ).start()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)


class _Link:
    """One client connection and its upstream, and the protocol state of both streams."""

    def __init__(self, proxy: FaultProxy, launch: _Launch, client: socket.socket) -> None:
        self.proxy, self.launch, self.client = proxy, launch, client
        self.upstream: socket.socket | None = None
        self.protocol: Protocol = protocol(proxy.scheme)
        self.from_client = bytearray()
        self.from_server = bytearray()
        self.closed = False
        self._close_lock = threading.Lock()

    def run(self) -> None:
        try:
            self.client.setblocking(True)
            self.upstream = socket.create_connection(self.proxy.upstream, timeout=_CONNECT_TIMEOUT_S)
            self.upstream.settimeout(None)
            for sock in (self.client, self.upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pump()
        except OSError:
            pass
        finally:
            self.close()
            for end in (self.client, self.upstream):
                if end is not None:
                    end.close()
            self.proxy._forget(self)

    def _pump(self) -> None:
        assert self.upstream is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.client, selectors.EVENT_READ, "client")
            sel.register(self.upstream, selectors.EVENT_READ, "server")
            while not self.closed:
                for key, _ in sel.select():
                    self.proxy._held.wait()
                    if self._ended():  # cut from another thread while this one waited
                        return
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    forward = self._from_client if key.data == "client" else self._from_server
                    if not forward(data):
                        return

    def _from_client(self, data: bytes) -> bool:
        assert self.upstream is not None
        self.from_client += data
        out = bytearray()
        for msg in self._read(self.protocol.client, self.from_client):
            if msg.reply is not None:
                self.client.sendall(msg.reply)
                continue
            armed = self.launch.armed
            if msg.op is not None and armed is not None and armed.take(msg.op, "reset"):
                self.upstream.sendall(out)
                armed.applied(
                    f"reset the connection of {self._label(msg, armed)} before the request was sent"
                )
                self.close(rst=True)
                return False
            out += msg.data
        if out:
            self.upstream.sendall(out)
        return True

    def _from_server(self, data: bytes) -> bool:
        self.from_server += data
        out = bytearray()
        for msg in self._read(self.protocol.server, self.from_server):
            if msg.op is not None and msg.op in self.protocol.announces:
                if out:
                    self.client.sendall(out)
                    out.clear()
                if not self._announce(msg):
                    return False
                self.proxy._held.wait()  # a stall= its point started holds this very answer
                if self._ended():
                    return False
            out += msg.data
        if out:
            self.client.sendall(out)
        return True

    def _read(self, read: Callable[[bytearray], list[Message]], buffer: bytearray) -> list[Message]:
        """The whole messages of ``buffer``; bytes the protocol cannot read (not the protocol the
        ``--proxy`` scheme said) make the connection a plain byte pipe from here on, never a
        fault nobody asked for."""
        before = bytes(buffer)
        try:
            return read(buffer)
        except (ValueError, IndexError, struct.error):
            self.protocol = Protocol()
            buffer[:] = before
            return self.protocol.client(buffer)

    def _announce(self, msg: Message) -> bool:
        """The dependency answered ``msg.op``: say ``during:NAME.OP`` and apply an armed drop.
        False: the connection is closed with the answer unsent."""
        control = self.launch.control
        if control is not None:
            try:
                control.send(f"during:{self.proxy.name}.{msg.op}")
            except ControlChannelError:
                self.close()  # the supervisor killed the agent here: nobody is left to answer
                return False
        armed = self.launch.armed
        if armed is not None and armed.take(msg.op, "drop"):
            time.sleep(armed.hold_s)
            held = f" (held {armed.hold_s:g}s)" if armed.hold_s else ""
            armed.applied(
                f"dropped the answer of {self._label(msg, armed)}: {self.proxy.name} did it, the"
                f" connection was closed with its answer unsent{held}"
            )
            self.close()
            return False
        return True

    def _label(self, msg: Message, armed: Armed) -> str:
        op = f"{self.proxy.name}.{msg.op}"
        return op if armed.occurrence == 1 else f"{op}#{armed.occurrence}"

    def _ended(self) -> bool:
        return self.closed

    def close(self, rst: bool = False) -> None:
        """End both sides (``rst``: the client's with a reset, no FIN); any thread may call it, the
        link's own thread then wakes (its upstream shut) and releases both sockets."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        if rst:
            with contextlib.suppress(OSError):
                self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.client.close()  # with a zero linger: RST, no FIN
        else:
            with contextlib.suppress(OSError):
                self.client.shutdown(socket.SHUT_RDWR)
        if self.upstream is not None:
            with contextlib.suppress(OSError):
                self.upstream.shutdown(socket.SHUT_RDWR)
