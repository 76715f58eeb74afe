"""Wire-compatible fakes: route families served by the HTTP fakes, one module per family.

A family (``hooks``, a payment provider's profile) is one module that calls :func:`route` for
the paths it serves; its routes go into the one route table of the guarded server
(:data:`killdrill.fakes.httpguard.ROUTES`), so a family inherits whatever the guard does (secret,
body limits, deadlines, quiet errors, 405 for a wrong method).  Every module of this package is a
family, loaded by :func:`load_families` when the HTTP fakes are imported: a new wire fake is one
new file. Part of ``killdrill.fakes`` (its layer): may import the fakes' own modules, ``ledger``,
``providers``, ``records`` and ``errors``.

A handler gets an :class:`Exchange`: the request (method, path, headers, body), the fakes of the
attempt (read once per request), and :meth:`Exchange.finish`, which announces
``during:PROVIDER.OP`` after the effect is committed and then answers, or drops the connection
when the supervisor killed the caller there (the provider did it, the caller never heard).
Every recorded answer of the HTTP fakes goes through ``finish``; Stripe-shaped replies (the
generic ``/fakes/`` route and the Stripe profile) are rendered by :func:`stripe_render`.

The SMTP fake (:mod:`killdrill.fakes.wire.smtp`) is not an HTTP route and is not loaded here.
"""

from __future__ import annotations

import functools
import importlib
import json
import pkgutil
import re
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, Protocol

from killdrill.agent import ControlChannelError
from killdrill.fakes import Answer, FakeRequest, IndeterminateError, Perform, harness_now
from killdrill.fakes.httpguard import Request
from killdrill.fakes.httpguard import route as guard_route
from killdrill.fakes.serving import Binding, ServerFakes
from killdrill.ledger import Ledger
from killdrill.records import CREATED

__all__ = [
    "NOT_ROUTES",
    "Binding",
    "Exchange",
    "FakeRequest",
    "Reply",
    "ServerFakes",
    "creates",
    "iso_time",
    "load_families",
    "record_effect",
    "route",
    "stripe_error",
    "stripe_render",
]

NOT_ROUTES = frozenset({"smtp"})
"""Modules of this package that are not route families (the SMTP server needs the extra)."""

Reply = tuple[int, Any, Mapping[str, str]]
"""What a profile renders: HTTP status, JSON body, extra headers."""


class _RouteHandler(Protocol):
    """What a route needs of the HTTP fakes' request handler (``killdrill.fakes.http._FakesHandler``)."""

    server: Any
    headers: Any

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None: ...
    def hang_up(self) -> None: ...
    def fakes(self) -> tuple[ServerFakes, Binding]: ...


_loaded = False
_load_lock = threading.Lock()


def route(
    pattern: str, methods: str = "GET POST PUT PATCH DELETE"
) -> Callable[[Callable[[Exchange, re.Match[str]], None]], Callable[[Exchange, re.Match[str]], None]]:
    """Decorator: serve ``pattern`` (matched against the whole path, query string removed) with
    ``fn(exchange, match)``, registered in the guard's one route table."""

    def register(fn: Callable[[Exchange, re.Match[str]], None]) -> Callable[[Exchange, re.Match[str]], None]:
        def serve(handler: Any, request: Request) -> None:
            fn(Exchange(handler, request), request.match)

        serve.__name__ = serve.__qualname__ = fn.__name__
        guard_route(methods, pattern)(serve)
        return fn

    return register


def load_families() -> None:
    """Import every family of this package once (their routes register as they load)."""
    global _loaded
    with _load_lock:
        if _loaded:
            return
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_") and info.name not in NOT_ROUTES:
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True


def stripe_error(
    status: int, message: str, code: str | None = None, type_: str = "invalid_request_error"
) -> Reply:
    """A Stripe-shaped error reply; ``Stripe-Should-Retry`` is true for 409, 429 and 503."""
    body = {"error": {"type": type_, "message": message, "code": code, "param": None}}
    return status, body, {"Stripe-Should-Retry": "true" if status in (409, 429, 503) else "false"}


def stripe_render(
    key: str | None, resource: Callable[[Any], Any] = lambda body: body
) -> Callable[[Answer], Reply]:
    """How a Stripe-like fake answers: ``Idempotent-Replayed``, the key echoed, ``Stripe-Should-Retry``
    on an error, and a success's body as ``resource`` renders it."""

    def render(answer: Answer) -> Reply:
        headers = {"Idempotent-Replayed": "true" if answer.replayed else "false"}
        if key:
            headers["Idempotency-Key"] = key
        if answer.error is not None or answer.status >= 400:
            headers["Stripe-Should-Retry"] = "true" if answer.should_retry else "false"
            return answer.status, answer.body, headers
        return answer.status, resource(answer.body), headers

    return render


class Exchange:
    """One request to a wire fake, and how to answer it."""

    def __init__(self, handler: _RouteHandler, request: Request) -> None:
        self.handler = handler
        self.method = request.method
        self.path = request.path
        self.query = request.query
        self.headers = handler.headers
        self.raw = request.body

    @functools.cached_property
    def _bound(self) -> tuple[ServerFakes, Binding]:
        return self.handler.fakes()  # the binding is read once per request

    @property
    def binding(self) -> Binding:
        return self._bound[1]

    def json(self) -> Any:
        """The body as JSON (None when empty); ValueError when it is not JSON (or nested too deep)."""
        try:
            return json.loads(self.raw) if self.raw.strip() else None
        except RecursionError:
            raise ValueError("the JSON body is nested too deeply") from None

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value if value else None

    @property
    def config(self) -> Mapping[str, Any]:
        """The drill's configuration of the wire fakes (``FakesServer(wire=...)``)."""
        return getattr(self.handler.server, "wire", None) or {}

    def fakes(self) -> ServerFakes:
        return self._bound[0]

    def execute(self, request: FakeRequest) -> Answer:
        """Decide, perform and record the request under its key rules (claim, latency, execute),
        under the attempt's armed connection fault."""
        return self.fakes().execute(request)

    def reply(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        self.handler.send_json(status, body, dict(headers or {}))

    def finish(self, answer: Answer, render: Callable[[Answer], Reply]) -> None:
        """Announce ``during:PROVIDER.OP`` (the call is recorded), then answer as ``render`` says.

        An injected ``indeterminate`` fault reaches ``render`` as a 500 error; ``drop`` and a
        supervisor that killed the caller at the point close the connection unanswered.
        """
        control = self.binding.control
        if control is not None:
            try:
                control.send(f"during:{answer.call.provider}.{answer.call.op}")
            except ControlChannelError:
                self.handler.hang_up()  # the supervisor killed the caller: nobody is left to answer
                return
        if answer.fault == "drop":
            self.handler.hang_up()
            return
        if answer.fault == "indeterminate":
            err = IndeterminateError(
                f"{answer.call.provider}.{answer.call.op}: injected error after the request was executed"
            )
            answer = Answer(answer.call, err.status, err.to_body(), error=err, fault=answer.fault)
        status, body, headers = render(answer)
        meta = {"X-Killdrill-Outcome": answer.call.outcome, "X-Killdrill-Seq": str(answer.call.seq)}
        self.reply(status, body, {**meta, **headers})


def record_effect(
    ledger: Ledger,
    provider: str,
    op: str,
    key: str | None,
    payload: dict[str, Any],
    result: dict[str, Any],
    *,
    prefix: str,
    ref: str | None = None,
    attempt: int,
    pid: int,
    context: dict[str, Any] | None = None,
) -> Answer:
    """An effect from a receiver that dedupes nothing: it happens and is recorded (with the key the
    caller sent, for the verdict, and the runtime context the call carried) in one transaction."""
    with ledger.transaction() as tx:
        tx.context = context
        effect_id = tx.next_id(prefix)
        body = {**result, "id": effect_id}
        tx.put_effect(provider, effect_id, body, ref=ref)
        call = tx.record(provider, op, key, payload, CREATED, effect_id, attempt, pid)
    return Answer(call, 200, body)


def iso_time(seconds: float) -> str:
    """``2026-12-07T15:04:05.123Z``: a time as the payment APIs write it (UTC, milliseconds)."""
    at = datetime.fromtimestamp(seconds, timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def creates(
    provider: str,
    prefix: str,
    data: dict[str, Any],
    ref: str | None = None,
    stamp: Callable[[float], dict[str, Any]] | None = None,
) -> Perform:
    """The effect of a create: a new resource ``data`` with the next ``prefix_N`` id, and the
    fields ``stamp`` makes of the harness clock's now (a creation time, so a test that moves the
    clock sees it move)."""

    def perform(tx: Any) -> tuple[str, dict[str, Any]]:
        effect_id = tx.next_id(prefix)
        result = {**data, **(stamp(harness_now(tx)) if stamp else {}), "id": effect_id}
        tx.put_effect(provider, effect_id, result, ref=ref)
        return effect_id, result

    return perform
