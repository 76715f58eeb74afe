"""The guarded HTTP server under the fakes: who may call, how much, how long, and the route table.

The fakes listen on 127.0.0.1, where every local user can connect, and a forged request is a
forged effect in the ledger (a correct agent then fails).  So every request passes, before any
route sees it:

- the drill's secret: the first path segment (the base URL is ``http://127.0.0.1:PORT/SECRET``,
  so SDKs configured with a base URL send it without knowing; ``X-Killdrill-Secret`` works too).
  Without it: 404, nothing read, connection closed.
- bounds: a body of at most ``MAX_BODY`` bytes with a ``Content-Length`` (413 / 411 / 400
  otherwise), request line and headers as ``http.server`` bounds them (414 / 431).
- time: the request line, headers and body must arrive within ``REQUEST_DEADLINE_S``, an idle
  keep-alive connection is closed after the same time (a watchdog shuts the socket, so a
  drip-feeding client cannot hold a thread), and at most ``MAX_CONNECTIONS`` are served at once;
  at the cap, another user's connections are hung up on (the kernel says whose they are).
- quiet: garbage gets a 4xx, a fault of ours one 500 line to the caller; nothing is printed.

``stop()`` closes every connection and joins every handler thread.  Every route of the fakes
(the generic ``/fakes/`` route, the model's, each wire family's) is registered in the one table
``ROUTES`` with :func:`route`; a new route inherits all of the above.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from killdrill.fakes.peer import client_uids

__all__ = [
    "MAX_BODY",
    "NO_BODY",
    "ROUTES",
    "TOKEN_HEADERS",
    "GuardedHandler",
    "GuardedServer",
    "Request",
    "Route",
    "route",
]

MAX_BODY = 1 << 20
"""Largest request body (1 MiB): a provider call is a few kilobytes."""
REQUEST_DEADLINE_S = 10.0
"""Time a client has to send a whole request (or to start the next one on a kept-alive connection)."""
MAX_CONNECTIONS = 64
"""Connections served at once; more are answered 503 and closed."""
SECRET_HEADER = "X-Killdrill-Secret"
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True)
class Request:
    """A request that passed the guard: its method, path (secret removed), query, match and body."""

    method: str
    path: str
    query: str
    match: re.Match[str]
    body: bytes


TOKEN_HEADERS = ("X-Postmark-Server-Token",)
"""Headers an SDK that drops the base URL's path sends its API token in (besides ``Authorization:
Bearer``): KILLDRILL_FAKES_SECRET given as that token carries the drill's secret."""
NO_BODY: Any = object()
"""A body for :meth:`GuardedHandler.send_json` that answers nothing (an API whose success is empty)."""

Route = Callable[["GuardedHandler", Request], None]
ROUTES: list[tuple[frozenset[str], re.Pattern[str], Route]] = []
"""(methods, full-match path pattern, handler), tried in order."""


def route(methods: str, pattern: str) -> Callable[[Route], Route]:
    """Register ``fn(handler, request)`` for ``methods`` (``"POST"``, ``"GET PUT"``) and paths
    fully matching ``pattern``; the path matching with another method is answered 405."""

    def register(fn: Route) -> Route:
        ROUTES.append((frozenset(methods.upper().split()), re.compile(pattern), fn))
        return fn

    return register


class GuardedServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its connections: deadlines, a cap, a clean stop."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type[GuardedHandler], secret: str) -> None:
        super().__init__(address, handler)
        self.secret = secret
        self.attempt_secrets: set[str] = set()  # one per attempt: requests say which attempt sent them
        self.errors = 0  # exceptions that escaped a handler (counted, never printed)
        self._lock = threading.Lock()
        self._live: dict[socket.socket, float | None] = {}
        self._peers: dict[socket.socket, Any] = {}  # each live connection's client address
        self._handler_threads: set[threading.Thread] = set()
        self._stopping = threading.Event()
        # started with the first connection: most attempts of a drill never connect, and a
        # thread's start waits for it to run (a scheduler's hop on a loaded machine)
        self._watchdog: threading.Thread | None = None

    # -- connections ------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = len(self._live) >= MAX_CONNECTIONS or self._stopping.is_set()
        if full and not self._stopping.is_set() and self._foreign_evicted(client_address):
            self.shutdown_request(request)  # another user's: never a place
            return
        with self._lock:
            full = len(self._live) >= MAX_CONNECTIONS or self._stopping.is_set()
            if not full:
                self._live[request] = time.monotonic() + REQUEST_DEADLINE_S
                self._peers[request] = client_address
        if full:
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        with self._lock:
            self._handler_threads.add(thread)
            watchdog = self._watchdog is None
            if watchdog:
                self._watchdog = threading.Thread(
                    target=self._watch, name="killdrill-fakes-watchdog", daemon=True
                )
        if watchdog:
            assert self._watchdog is not None
            self._watchdog.start()
        thread.start()

    def _foreign_evicted(self, client_address: Any) -> bool:
        """At the cap: hang up on every connection of another user (every process of a drill is
        ours; another local user has no secret and could otherwise hold every place), waiting a
        moment for their places to free; is the new client another user's?  One read of
        ``/proc/net/tcp``, only when the cap is reached: nothing in the ordinary case."""
        host, port = self.server_address[:2]
        uids = client_uids((str(host), int(port)))
        me = os.getuid()
        with self._lock:
            foreign = [s for s, peer in self._peers.items() if uids.get(tuple(peer[:2]), me) != me]
        for sock in foreign:
            _hang_up(sock)
        deadline = time.monotonic() + 1.0
        while foreign and time.monotonic() < deadline:
            with self._lock:
                if len(self._live) < MAX_CONNECTIONS:
                    break
            time.sleep(0.005)
        return uids.get(tuple(client_address[:2]), me) != me

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._live.pop(request, None)
                self._peers.pop(request, None)
                self._handler_threads.discard(threading.current_thread())

    def set_deadline(self, sock: socket.socket, seconds: float | None) -> None:
        """Give ``sock`` ``seconds`` to send what is owed (None: a route is working, no deadline)."""
        with self._lock:
            if sock in self._live:
                self._live[sock] = None if seconds is None else time.monotonic() + seconds

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            now = time.monotonic()
            with self._lock:
                late = [s for s, deadline in self._live.items() if deadline is not None and now > deadline]
            for sock in late:
                _hang_up(sock)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a client that vanished or sent garbage is not the drill's output."""
        self.errors += 1

    def close_all(self, join_s: float = 5.0) -> None:
        """Close every connection and wait for every handler thread (after ``shutdown``)."""
        self._stopping.set()
        with self._lock:
            live, threads = list(self._live), list(self._handler_threads)
        for sock in live:
            _hang_up(sock)
        deadline = time.monotonic() + join_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            watchdog = self._watchdog
        if watchdog is not None:
            watchdog.join(1.0)


def _hang_up(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class GuardedHandler(BaseHTTPRequestHandler):
    """Authenticates, bounds and times every request, then dispatches it through ``ROUTES``."""

    server: GuardedServer
    secret = ""  # the secret the current request carried (set by the guard)
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_DEADLINE_S  # per read; the watchdog bounds the whole request

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a drill's output is the verdict, not an access log."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """``http.server``'s own rejections (bad request line, too many headers): JSON, then close."""
        self.close_connection = True
        try:
            self.send_json(code, _error(message or "bad request"))
        except OSError:
            pass

    def handle_one_request(self) -> None:
        self.server.set_deadline(self.connection, REQUEST_DEADLINE_S)
        super().handle_one_request()

    # every method goes through the guard
    def do_GET(self) -> None:
        self._guarded()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    # -- the guard --------------------------------------------------------------------------
    def _guarded(self) -> None:
        raw_path, _, query = self.path.partition("?")
        path = self._authenticated(raw_path)
        if path is None:
            self._refuse(404, "Unrecognized request URL.")  # says nothing about why
            return
        body = self._read_body()
        if body is None:
            return
        self.server.set_deadline(self.connection, None)  # the route may hold (during:, latency)
        allowed: list[str] = []
        for methods, pattern, handler in ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if self.command not in methods:
                allowed.extend(sorted(methods))
                continue
            self.dispatch(handler, Request(self.command, path, query, match, body))
            return
        if allowed:
            allow = {"Allow": ", ".join(dict.fromkeys(allowed))}
            self.send_json(405, _error(f"{self.command} is not allowed on {path}"), allow)
        else:
            self.send_json(404, _error(f"Unrecognized request URL ({self.command}: {path})."))

    def _authenticated(self, path: str) -> str | None:
        """The path without the secret segment, or None when the request does not carry a secret.

        The server's own secret, or one of its attempts' (``GuardedServer.attempt_secrets``);
        the one it carried is kept in ``self.secret`` (which attempt sent it)."""
        candidates = [self.server.secret, *self.server.attempt_secrets]
        head, _, rest = path.lstrip("/").partition("/")
        header = self.headers.get(SECRET_HEADER, "")
        # SDKs that drop the base URL's path (gocardless_pro joins "/payments" onto the host) carry
        # the secret as their access token: KILLDRILL_FAKES_SECRET as the API key.
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        bearer = token.strip() if scheme.lower() == "bearer" else ""
        tokens = [(self.headers.get(name, ""), path) for name in TOKEN_HEADERS]
        for given, stripped in ((head, "/" + rest), (header, path), (bearer, path), *tokens):
            if not given:
                continue
            for secret in candidates:
                if secrets.compare_digest(given.encode("utf-8", "replace"), secret.encode()):
                    self.secret = secret
                    return stripped
        return None

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "send the body with a Content-Length")
            return None
        length_text = self.headers.get("Content-Length") or "0"
        if not length_text.isdigit():
            self._refuse(400, f"invalid Content-Length {length_text[:40]!r}")
            return None
        length = int(length_text)
        if length > MAX_BODY:
            self._refuse(413, f"a request body is at most {MAX_BODY} bytes")
            return None
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            self.close_connection = True
            return None
        return body

    def _refuse(self, status: int, message: str) -> None:
        """Answer and close without reading the rest: the client may be hostile."""
        self.close_connection = True
        self.send_json(status, _error(message))

    def dispatch(self, handler: Route, request: Request) -> None:
        """Run a route; what it raises becomes a one-line 500 (overridden to map provider errors)."""
        try:
            handler(self, request)
        except Exception as exc:  # a fake's own bug: one line to the caller, never a dead thread
            self.send_json(500, _error(f"killdrill fakes: {type(exc).__name__}: {exc}", "api_error"))

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Answer ``body`` as JSON; :data:`NO_BODY` answers an empty body (SendGrid's 202)."""
        data = b"" if body is NO_BODY else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def hang_up(self) -> None:
        """Close the connection without a response: the caller sees the server vanish."""
        self.close_connection = True
        _hang_up(self.connection)


def _error(message: str, type_: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"type": type_, "message": message, "code": code, "param": None}}
