"""A generic HTTP sink: any method, any path under ``/hooks/`` (webhooks, a ticket API, ...).

Each request is recorded as ``hooks.<method>`` with payload ``{"path", "body"}`` (plus ``query``
when there is one) and the key from the ``Idempotency-Key`` header (another header name with
``FakesServer(wire={"hooks": {"key_header": ...}})``).  A route is:

- ``keyed``: a repeated key replays the stored response (``Idempotent-Replayed: true``); another
  body under the same key is refused (400), a key still executing gets a 409 (Stripe's rules);
- ``naive``: every request creates, whatever its key (the key is still recorded); the fault
  settings (``error_first``, ``latency``, ...) apply to keyed requests only.

``wire={"hooks": {"routes": {"/tickets*": "keyed", "/notify": "naive"}}}`` chooses per route
(shell-style patterns on the path after ``/hooks``, first match wins); with no match a request
is keyed when it carries the key header and naive otherwise.  A created resource gets an ``id``.

``GET`` is safe, not an effect: ``GET /hooks/.../{id}`` answers the resource that id names (a
ticket API's status check), unrecorded, so a resumed agent that polls again is not a duplicate.

A key longer than ``MAX_KEY_LENGTH`` (255, Stripe's bound) is refused with a 400, nothing recorded.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Any

from killdrill.fakes import KeyRules
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, creates, record_effect, route

__all__ = ["DEFAULT_KEY_HEADER", "KEYED", "MAX_KEY_LENGTH", "NAIVE", "route_mode"]

DEFAULT_KEY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
KEYED, NAIVE = "keyed", "naive"
_RULES = KeyRules()


def route_mode(config: Mapping[str, Any], path: str, has_key: bool) -> str:
    """``keyed`` or ``naive`` for ``path``: the first configured pattern that matches, else by key."""
    for pattern, mode in (config.get("routes") or {}).items():
        if fnmatch.fnmatchcase(path, pattern):
            if mode not in (KEYED, NAIVE):
                raise ValueError(f"hooks route {pattern!r}: mode must be keyed or naive, not {mode!r}")
            return str(mode)
    return KEYED if has_key else NAIVE


def _body(ex: Exchange) -> Any:
    try:
        return ex.json()
    except ValueError:
        return ex.raw.decode("utf-8", "replace")


def _render(answer: Any) -> Reply:
    headers = {"Idempotent-Replayed": "true" if answer.replayed else "false"}
    return answer.status, answer.body, headers


@route(r"/hooks(?P<path>/.*)?", "GET")
def read(ex: Exchange, m: re.Match[str]) -> None:
    last = (m.group("path") or "/").rstrip("/").rsplit("/", 1)[-1]
    resource = ex.fakes().ledger.effect("hooks", last) if last else None
    if resource is None:
        ex.reply(404, {"error": {"type": "invalid_request_error", "message": f"no resource {last!r}"}})
        return
    ex.reply(200, resource)


@route(r"/hooks(?P<path>/.*)?", "POST PUT PATCH DELETE")
def sink(ex: Exchange, m: re.Match[str]) -> None:
    config = ex.config.get("hooks") or {}
    path = m.group("path") or "/"
    header = str(config.get("key_header") or DEFAULT_KEY_HEADER)
    key = ex.header(header)
    if key is not None and len(key) > MAX_KEY_LENGTH:
        message = f"{header} must be at most {MAX_KEY_LENGTH} characters long."
        ex.reply(400, {"error": {"type": "invalid_request_error", "message": message, "param": header}})
        return
    payload: dict[str, Any] = {"path": path, "body": _body(ex)}
    if ex.query:
        payload["query"] = ex.query
    op = ex.method.lower()
    result = {"object": "hook", "method": ex.method, **payload}
    if key is None or route_mode(config, path, True) == NAIVE:
        fakes = ex.fakes()
        answer = record_effect(
            fakes.ledger,
            "hooks",
            op,
            key,
            payload,
            result,
            prefix="hk",
            attempt=fakes.attempt,
            pid=fakes.pid,
            context=fakes.context,
        )
    else:
        answer = ex.execute(FakeRequest("hooks", op, key, payload, creates("hooks", "hk", result), _RULES))
    ex.finish(answer, _render)
