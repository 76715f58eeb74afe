"""The fakes over HTTP on 127.0.0.1, recording to the same ledger as the in-process fakes.

Routes, under the base URL ``http://127.0.0.1:PORT/SECRET`` (see :mod:`killdrill.fakes.httpguard`
for the checks every request passes first; register new routes there with ``route``):
``POST /fakes/{provider}/{op}``  JSON object of keyword arguments (``Idempotency-Key`` header or an
                                 ``idempotency_key`` field); reads (``lookup``, ``get``) and
                                 ``configure`` work the same way.  Answers JSON.
Any method, any path a wire family registered (``killdrill.fakes.wire``): ``/hooks/...``, the
Stripe subset (``/v1/payment_intents``, ``/v1/refunds``), Razorpay, GoCardless, Checkout.com.
``POST /v1/chat/completions``    the model fake (OpenAI and Anthropic APIs), answered from a
``POST /v1/messages``            script and recorded as calls, never effects: ``fakes/model.py``.
``POST /mcp``                    the fakes as MCP tools over streamable HTTP (``fakes/mcp/http.py``).

Unlike the in-process fakes, a keyed request here is two transactions: the key is claimed (in
flight: a concurrent request with it gets a 409), the optional ``latency`` passes, then the effect
and its record are committed.  After that commit the handler announces ``during:PROVIDER.OP`` on
the attempt's control channel and blocks until the supervisor answers; when the supervisor kills
the caller instead, it closes the channel and the handler drops the connection unanswered.

Connection faults armed for one attempt (``FakesServer.arm``, from the schedule items
``drop:PROVIDER.OP[#N][~Xs]`` and ``reset:PROVIDER.OP[#N]``) count that attempt's requests of the
op, wire routes included: on the N-th, ``drop`` lets the provider commit, holds the response the
given time, then closes the connection unanswered; ``reset`` resets the connection (RST) before
the request is processed, so nothing is committed.  Either way the caller's own retry logic runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import select
import socket
import struct
import sys
import threading
import uuid
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from typing import Any

from killdrill import envvars
from killdrill.agent import CONTEXT_HEADER, wire_context_of
from killdrill.errors import install_hint
from killdrill.fakes import FakeProviderError, fake_classes, wire
from killdrill.fakes import model as _model
from killdrill.fakes import model_responses as _model_responses
from killdrill.fakes.httpguard import GuardedHandler, GuardedServer, Request, Route, route
from killdrill.fakes.peer import peer_pid
from killdrill.fakes.serving import Binding, FaultPlan, Reset, ServerFakes
from killdrill.fakes.wire import Exchange, stripe_render
from killdrill.fakes.wire.stripe import decode_form
from killdrill.ledger import Ledger, LedgerError
from killdrill.providers import spec

__all__ = ["FakesServer", "decode_form", "main"]


class _FakesHandler(GuardedHandler):
    """The fakes' routes share this: Stripe-shaped errors and headers, the attempt's binding."""

    server: _Server
    context: dict[str, Any] | None = None  # the runtime context the current request carried

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().send_json(status, body, {"Request-Id": f"req_{uuid.uuid4().hex[:14]}", **(headers or {})})

    def dispatch(self, handler: Route, request: Request) -> None:
        """Every route of the fakes runs here: what escapes it is one Stripe-shaped 500 line.

        The request's runtime context (``X-Killdrill-Context``) is read here, after the guard: a
        caller that can send it is one given the drill's secret, as for the effect itself."""
        try:
            self.context = wire_context_of(self.headers.get(CONTEXT_HEADER))
        except ValueError as exc:
            self.stripe_error(400, str(exc))
            return
        try:
            handler(self, request)
        except Reset:
            self.reset()
        except LedgerError as exc:  # the ledger is unusable: the caller learns it in one line
            self.stripe_error(500, str(exc), type_="api_error")
        except Exception as exc:  # a fake's own bug: one line to the caller, never a dead thread
            self.stripe_error(500, f"killdrill fakes: {type(exc).__name__}: {exc}", type_="api_error")

    def reset(self) -> None:
        """Reset the connection (RST, no response): the caller sees ``ECONNRESET``."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def stripe_error(
        self, status: int, message: str, code: str | None = None, type_: str = "invalid_request_error"
    ) -> None:
        status, body, headers = wire.stripe_error(status, message, code, type_)
        self.send_json(status, body, dict(headers))

    def fakes(self) -> tuple[ServerFakes, Binding]:
        """The fakes as bound now.  The attempt comes from the binding only, never from the caller."""
        binding = self.server.bindings.get(self.secret) or self.server.binding
        fakes = ServerFakes(binding.ledger, binding.attempt, self.caller_pid, binding.faults, self.context)
        return fakes, binding

    def caller_pid(self) -> int:
        """The pid of the process that sent this request (the kernel's answer, see
        :mod:`killdrill.fakes.peer`), else an ``X-Killdrill-Pid`` header, else 0."""
        try:
            pid = peer_pid(self.client_address, self.connection.getsockname())
        except OSError:
            pid = 0
        if pid:
            return pid
        pid_text = self.headers.get("X-Killdrill-Pid", "")
        return int(pid_text) if pid_text.isdigit() and len(pid_text) < 10 else 0

    def idempotency_key(self) -> str | None:
        """The ``Idempotency-Key`` header (Stripe allows 255 characters), or None."""
        key = self.headers.get("Idempotency-Key") or None
        if key is not None and len(key) > 255:
            raise _BadRequest("Idempotency-Key is longer than 255 characters")
        return key


class _BadRequest(Exception):
    """A request a real provider would answer 400."""


def _route(method: str, pattern: str) -> Callable[[Callable[[_FakesHandler, Request], None]], Route]:
    """Register a fakes route; a ``_BadRequest`` it raises is a 400."""

    def register(fn: Callable[[_FakesHandler, Request], None]) -> Route:
        def run(handler: GuardedHandler, request: Request) -> None:
            assert isinstance(handler, _FakesHandler)
            try:
                fn(handler, request)
            except _BadRequest as exc:
                handler.stripe_error(400, str(exc))

        return route(method, pattern)(run)

    return register


_PROVIDER_METHODS = frozenset({"configure", "fence"})
"""Methods every fake provider has besides its declared operations (``FakeProvider.configure``,
``FakeProvider.fence``): served on the same route, never recorded as calls."""


@_route("POST", r"/fakes/([a-z_]+)/([a-z_]+)")
def _generic(h: _FakesHandler, req: Request) -> None:
    provider, op = req.match.groups()
    declared = spec(provider)  # loads the entry points when the name is not a built-in
    operation = declared.operation(op) if provider in fake_classes() else None
    if operation is None and not (op in _PROVIDER_METHODS and provider in fake_classes()):
        h.stripe_error(404, f"no such fake operation: {provider}.{op}")
        return
    try:
        kwargs = json.loads(req.body or b"{}")
    except (ValueError, RecursionError):
        kwargs = None
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise _BadRequest("the body must be a JSON object")
    key = h.idempotency_key()
    if key and operation is not None and operation.keyed:
        kwargs.setdefault("idempotency_key", key)
    ex = Exchange(h, req)
    fakes = ex.fakes()
    method = getattr(fakes.provider(provider), op)
    try:
        answer, result = fakes.serve(lambda: method(**kwargs))
    except FakeProviderError as exc:  # refused before any request, e.g. a stale fencing token: 409
        h.stripe_error(exc.status, f"{provider}.{op}: {exc}", exc.code, exc.type)
        return
    except (TypeError, ValueError) as exc:
        raise _BadRequest(f"{provider}.{op}: {exc}") from None
    if answer is not None:
        replayed = answer.replayed
        ex.finish(answer, stripe_render(key, lambda body: {**body, "replayed": replayed}))
        return
    h.send_json(200, {"result": result})  # a read or configure: not recorded, not announced


@route("POST", r"/mcp")
def _mcp(h: GuardedHandler, req: Request) -> None:
    """The counting MCP server over streamable HTTP (:mod:`killdrill.fakes.mcp.http`, extra ``mcp``)."""
    try:
        from killdrill.fakes.mcp.http import serve_mcp
    except ImportError as exc:
        assert isinstance(h, _FakesHandler)
        h.stripe_error(501, f"the MCP route needs the mcp package ({exc}): {install_hint('mcp')}")
        return
    serve_mcp(h, req)


def _model_route(path: str, serve: Callable[[Any, bytes], None]) -> None:
    """The model fake's endpoints (:mod:`killdrill.fakes.model`), behind the same guard."""
    route("POST", re.escape(path))(lambda handler, request: serve(handler, request.body))


for _path, _serve_model in {**_model.ROUTES, **_model_responses.ROUTES}.items():
    _model_route(_path, _serve_model)
wire.load_families()  # the wire fakes' routes join the same table


class _Server(GuardedServer):
    binding: Binding  # requests under the server's own secret
    bindings: dict[str, Binding]  # requests under an attempt's secret
    model: _model.ModelFake | None = None
    model_asked: dict[tuple[str, int, str], int]  # (thread, attempt, conversation) -> times asked
    wire: Mapping[str, Any]  # configuration of the wire fakes, e.g. {"hooks": {...}}


class FakesServer:
    """The HTTP fakes on 127.0.0.1 (a free port), recording to ``ledger`` (a path or URL).

    The base URL carries the drill's ``secret`` as its first path segment: only a caller given
    the URL (the agent, through ``KILLDRILL_FAKES_URL``) can record an effect.
    """

    def __init__(
        self,
        ledger: str | os.PathLike[str],
        *,
        thread: str = "default",
        attempt: int = 1,
        port: int = 0,
        model: _model.ModelFake | None = None,
        wire: Mapping[str, Any] | None = None,
        secret: str | None = None,
        check_ledger: bool = True,
    ):
        """``check_ledger=False``: the caller has just written ``ledger`` (a drill's case, its
        marker), so :meth:`start` need not open it to fail early; the first request opens it."""
        self.ledger_url = os.fspath(ledger)
        self.check_ledger = check_ledger
        self.wire = dict(wire or {})
        self.port = port
        self.secret = secret or secrets.token_urlsafe(18)
        self.model = model
        self._initial = Binding(self.ledger_url, thread, attempt, None)
        self._initial_launch: Hashable | None = None
        self._launch_secrets: dict[Hashable, str] = {}
        self._server: _Server | None = None
        self.url: str | None = None

    def start(self) -> str:
        """Listen and serve in a background thread; returns the base URL (``http://127.0.0.1:PORT/SECRET``)."""
        if self._server is not None:
            assert self.url is not None
            return self.url
        if self.check_ledger:
            Ledger(self.ledger_url, self._initial.thread)  # fail now, in one line, if the ledger is unusable
        server = _Server(("127.0.0.1", self.port), _FakesHandler, self.secret)
        server.bindings = {}
        server.binding = self._initial
        server.model = self.model
        server.model_asked = {}
        server.wire = self.wire
        self._server = server
        _ACCEPTOR.add(server)
        self.url = f"http://127.0.0.1:{server.server_address[1]}/{self.secret}"
        return self.url

    def attempt_url(self, launch: Hashable) -> tuple[str, str]:
        """A base URL (and its secret) of one launch alone (``launch``: any key the caller gives
        :meth:`bind` again): what it sends is recorded under its attempt and announced on its
        channel even while others run (concurrent resumers, a paused zombie). Call start() first."""
        assert self._server is not None and self.url is not None, "start() the server first"
        secret = self._launch_secrets.get(launch)
        if secret is None:
            secret = self._launch_secrets[launch] = secrets.token_urlsafe(18)
            self._server.attempt_secrets.add(secret)
        return self.url.rsplit("/", 1)[0] + "/" + secret, secret

    def bind(
        self,
        thread: str,
        attempt: int,
        control_address: str | None = None,
        control_token: str | None = None,
        *,
        launch: Hashable | None = None,
    ) -> None:
        """Record requests of ``attempt`` under ``thread``; announce ``during:`` on that channel.

        Requests under the server's own URL follow the launch bound last; those under a launch's
        own URL (:meth:`attempt_url`) follow that launch, whichever started last."""
        binding = Binding.of_attempt(self.ledger_url, thread, attempt, control_address, control_token)
        self._set_binding(binding, launch)

    def _set_binding(self, binding: Binding, launch: Hashable | None) -> None:
        self._initial, self._initial_launch = binding, launch
        if self._server is not None:
            self._server.binding = binding
            secret = self._launch_secrets.get(launch) if launch is not None else None
            if secret is not None:
                self._server.bindings[secret] = binding

    def arm(self, run: Any) -> None:
        """Arm the connection fault of the attempt just bound (a supervisor's ``Running`` whose fault
        is a ``drop:``/``reset:`` schedule item); when it lands, the attempt counts as reached."""
        fault = run.spec.fault
        if fault is None or fault.fault is None:
            return

        def applied(note: str) -> None:
            run.fired = True
            run.notes.append(note)

        plan = FaultPlan(fault.fault, fault.point, fault.occurrence, (fault.hold_ms or 0.0) / 1000.0, applied)
        self._set_binding(replace(self._initial, faults=plan), self._initial_launch)

    def stop(self) -> None:
        """Stop serving, close every connection and wait for every handler thread to end."""
        server, self._server = self._server, None
        if server is None:
            return
        self._launch_secrets.clear()
        _ACCEPTOR.remove(server)  # no connection is accepted for it any more
        server.server_close()
        server.close_all()
        self.url = None

    def __enter__(self) -> FakesServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Acceptor:
    """One thread of the process accepts the connections of every running server and hands each
    to its server's handler thread.  A drill starts a server around every launch: a serving
    thread of its own cost a thread start (a scheduler's hop: ~5 ms each at load 14) and a stop
    that had to wake and join it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held while a server accepts: remove() waits for it
        self._servers: dict[int, _Server] = {}
        self._epoll: select.epoll | None = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def add(self, server: _Server) -> None:
        with self._lock:
            if self._epoll is None:
                self._epoll = select.epoll()
                threading.Thread(
                    target=self._run, args=(self._epoll,), name="killdrill-fakes-http", daemon=True
                ).start()
            server.socket.setblocking(False)  # a connection reset before its accept blocks nothing
            self._servers[server.fileno()] = server
            self._epoll.register(server.fileno(), select.EPOLLIN)

    def remove(self, server: _Server) -> None:
        """Once this returns, ``server`` accepts nothing more (its socket can be closed)."""
        with self._lock:
            if self._servers.pop(server.fileno(), None) is not None and self._epoll is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(server.fileno())

    def _run(self, epoll: select.epoll) -> None:
        while True:
            try:
                events = epoll.poll()
            except OSError:  # closed under us (a fork's child)
                return
            for fd, _ in events:
                with self._lock:
                    server = self._servers.get(fd)
                    if server is not None:  # still running: accept and hand over
                        _accept(server)

    def _after_fork_in_child(self) -> None:
        # the thread is not in a forked child; the servers are the parent's
        self._lock = threading.Lock()
        self._servers = {}
        if self._epoll is not None:  # the child's copy of the descriptor only
            with contextlib.suppress(OSError):
                self._epoll.close()
        self._epoll = None


def _accept(server: _Server) -> None:
    """socketserver's ``_handle_request_noblock``: one connection accepted and handed over."""
    try:
        request, client_address = server.get_request()
    except OSError:  # gone before its accept (the socket does not block)
        return
    try:
        server.process_request(request, client_address)
    except Exception:
        server.handle_error(request, client_address)
        server.shutdown_request(request)


_ACCEPTOR = _Acceptor()


def main(argv: list[str] | None = None) -> int:
    """``python -m killdrill.fakes.http --ledger PATH``: serve the fakes by hand until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m killdrill.fakes.http", description=main.__doc__)
    parser.add_argument("--ledger", required=True, help="ledger file path or SQLAlchemy URL")
    parser.add_argument("--thread", default="default")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model-script", help="answer /v1/chat/completions and /v1/messages from FILE")
    parser.add_argument("--model-variance", type=int, metavar="SEED", help="vary the model's replies")
    args = parser.parse_args(argv)
    try:
        model = None
        if args.model_script:
            from killdrill.fakes.model_script import load_script

            model = _model.ModelFake(load_script(args.model_script), args.model_variance)
        server = FakesServer(args.ledger, thread=args.thread, port=args.port, model=model)
        url = server.start()
    except (LedgerError, OSError, ValueError) as exc:
        print(f"killdrill: {exc}", file=sys.stderr)
        return 2
    print(f"{envvars.FAKES_URL}={url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
