"""Wire-compatible fakes: route families served by the HTTP fakes, one module per family.

A family (``hooks``, a payment provider's profile) is one module that calls :func:`route` for
the path prefixes it serves; ``killdrill.fakes.http`` asks :func:`dispatch` before its own routes,
so a family inherits whatever the central handler does (body limits, authentication, quiet
errors).  Every module of this package is a family, loaded on the first request: a new fake
provider is one new file.

A handler gets an :class:`Exchange`: the request (method, path, headers, body), the ledger handle
of the attempt, and :meth:`Exchange.finish`, which announces ``during:PROVIDER.OP`` after the
effect is committed and then answers, or drops the connection when the supervisor killed the
caller there (the provider did it, the caller never heard).

The SMTP fake (:mod:`killdrill.fakes.wire.smtp`) is not an HTTP route and is not loaded here.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from killdrill.fakes import Answer, IndeterminateError, KeyRules, Perform
from killdrill.ledger import Ledger
from killdrill.records import CREATED

if TYPE_CHECKING:
    from killdrill.fakes.http import _Binding, _ServerFakes

__all__ = [
    "NOT_ROUTES",
    "Exchange",
    "Reply",
    "Route",
    "creates",
    "dispatch",
    "record_effect",
    "route",
    "routes",
]

NOT_ROUTES = frozenset({"smtp"})
"""Modules of this package that are not route families (the SMTP server needs the extra)."""

Reply = tuple[int, Any, Mapping[str, str]]
"""What a profile renders: HTTP status, JSON body, extra headers."""


class _Handler(Protocol):
    """What a route needs of the HTTP fakes' request handler (``killdrill.fakes.http._Handler``)."""

    server: Any
    headers: Any

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None: ...
    def hang_up(self) -> None: ...
    def fakes(self) -> tuple[_ServerFakes, _Binding]: ...


@dataclass(frozen=True)
class Route:
    """Requests whose path matches ``pattern`` (a regex) and whose method is in ``methods``."""

    pattern: re.Pattern[str]
    methods: frozenset[str]
    handler: Callable[[Exchange, re.Match[str]], None]


_ROUTES: list[Route] = []
_loaded = False
_load_lock = threading.Lock()  # the server is threaded: the first requests may arrive together


def route(
    pattern: str, methods: str = "GET POST PUT PATCH DELETE"
) -> Callable[[Callable[[Exchange, re.Match[str]], None]], Callable[[Exchange, re.Match[str]], None]]:
    """Decorator: serve ``pattern`` (matched against the whole path, query string removed)."""

    def register(fn: Callable[[Exchange, re.Match[str]], None]) -> Callable[[Exchange, re.Match[str]], None]:
        _ROUTES.append(Route(re.compile(pattern + r"\Z"), frozenset(methods.split()), fn))
        return fn

    return register


def routes() -> list[Route]:
    """Every registered route, the built-in families loaded."""
    global _loaded
    with _load_lock:
        if not _loaded:
            for info in pkgutil.iter_modules(__path__):
                if not info.name.startswith("_") and info.name not in NOT_ROUTES:
                    importlib.import_module(f"{__name__}.{info.name}")
            _loaded = True
        return list(_ROUTES)


def dispatch(handler: _Handler, method: str, path: str, query: str, body: bytes) -> bool:
    """Serve the request if a family owns its path; False leaves it to the caller (a 404).

    ``path`` comes without the drill's secret and ``body`` already read, both by the guard
    (:mod:`killdrill.fakes.httpguard`), which has checked and bounded the request.
    """
    for r in routes():
        m = r.pattern.match(path)
        if m is not None and method in r.methods:
            r.handler(Exchange(handler, method, path, query, body), m)
            return True
    return False


class Exchange:
    """One request to a wire fake, and how to answer it."""

    def __init__(self, handler: _Handler, method: str, path: str, query: str, body: bytes) -> None:
        self.handler = handler
        self.method = method
        self.path = path
        self.query = query
        self.headers = handler.headers
        self.raw = body

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

    def fakes(self) -> _ServerFakes:
        return self.handler.fakes()[0]

    def execute(
        self,
        provider: str,
        op: str,
        key: str | None,
        payload: dict[str, Any],
        perform: Perform,
        rules: KeyRules,
    ) -> Answer:
        """Decide, perform and record the request under ``rules`` (claim, latency, execute)."""
        return self.fakes().execute(provider, op, key, payload, perform, rules)  # with armed faults

    def reply(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        self.handler.send_json(status, body, dict(headers or {}))

    def finish(self, answer: Answer, render: Callable[[Answer], Reply]) -> None:
        """Announce ``during:PROVIDER.OP`` (the call is recorded), then answer as ``render`` says.

        An injected ``indeterminate`` fault reaches ``render`` as a 500 error; ``drop`` and a
        supervisor that killed the caller at the point close the connection unanswered.
        """
        control = self.handler.fakes()[1].control
        if control is not None:
            from killdrill.agent import ControlChannelError

            try:
                control.send(f"during:{answer.call.provider}.{answer.call.op}")
            except ControlChannelError:
                self.handler.hang_up()
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
) -> Answer:
    """An effect from a receiver that dedupes nothing: it happens and is recorded (with the key the
    caller sent, for the verdict) in one transaction."""
    with ledger.transaction() as tx:
        effect_id = tx.next_id(prefix)
        body = {**result, "id": effect_id}
        tx.put_effect(provider, effect_id, body, ref=ref)
        call = tx.record(provider, op, key, payload, CREATED, effect_id, attempt, pid)
    return Answer(call, 200, body)


def creates(provider: str, prefix: str, data: dict[str, Any], ref: str | None = None) -> Perform:
    """The effect of a create: a new resource ``data`` with the next ``prefix_N`` id."""

    def perform(tx: Any) -> tuple[str, dict[str, Any]]:
        effect_id = tx.next_id(prefix)
        result = {**data, "id": effect_id}
        tx.put_effect(provider, effect_id, result, ref=ref)
        return effect_id, result

    return perform
