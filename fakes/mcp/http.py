"""The counting MCP server at ``$KILLDRILL_FAKES_URL/mcp``: streamable HTTP inside the HTTP fakes.

The HTTP fakes are a threading ``http.server`` (not ASGI), and every request is one handler
thread already behind the fakes' guard (the drill's secret, body and time bounds, the
connection cap).  So the route runs the SDK's own streamable-HTTP transport on that thread: one
stateless session manager with JSON responses per request, in an event loop of the request's
own (``anyio.run``), fed the request's method, headers and body as an ASGI scope.  No second
port, no uvicorn, no thread shared between attempts: the request is recorded under the
binding the fakes server chose for it (its attempt, its control channel), exactly as the
``/fakes/`` route records it, and a kill at its ``during:`` point hangs up that connection only.
Stateless, POST only: no server-to-client stream (a GET is 405), which the fakes' tools never need.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from killdrill.agent import ControlChannelError
from killdrill.fakes.httpguard import GuardedHandler, Request
from killdrill.fakes.mcp.server import build_server
from killdrill.fakes.mcp.tools import ToolSpec, call_tool
from killdrill.fakes.serving import Reset, ServerFakes

__all__ = ["serve_mcp"]


@dataclass
class _Exchange:
    """One HTTP request's binding and what happened to it (a hang-up or reset wins over a reply)."""

    handler: Any
    ending: str | None = None  # "hang_up" or "reset": no response goes out
    status: int = 500
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)


_current: contextvars.ContextVar[_Exchange] = contextvars.ContextVar("killdrill_mcp_exchange")


def _invoke(
    tool: ToolSpec, arguments: Mapping[str, Any] | None, context: dict[str, Any] | None
) -> tuple[bool, dict[str, Any]]:
    """One tool call under the request's binding: recorded (with the runtime context of the
    request's header, else of its ``_meta``), ``during:`` announced, then answered."""
    exchange = _current.get()
    fakes, binding = exchange.handler.fakes()
    assert isinstance(fakes, ServerFakes)
    if fakes.context is None:
        fakes.context = context
    provider = fakes.provider(tool.provider)
    try:
        answer, outcome = fakes.serve(lambda: call_tool(provider, tool, arguments))
    except Reset:
        exchange.ending = "reset"
        return False, {"error": {"message": "connection reset"}}
    if answer is not None:
        if binding.control is not None:
            try:
                binding.control.send(f"during:{tool.provider}.{tool.op}")
            except ControlChannelError:
                exchange.ending = "hang_up"  # the supervisor killed the caller: nobody to answer
        if answer.fault == "drop":
            exchange.ending = "hang_up"
    ok, body = outcome
    return ok, body


_server = None


def _mcp_server() -> Any:
    global _server
    if _server is None:
        _server = build_server(_invoke)
    return _server


async def _run(scope: dict[str, Any], body: bytes, exchange: _Exchange) -> None:
    manager = StreamableHTTPSessionManager(app=_mcp_server(), json_response=True, stateless=True)
    done = anyio.Event()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            exchange.status = int(message["status"])
            exchange.headers = list(message.get("headers") or [])
        elif message["type"] == "http.response.body":
            exchange.body += message.get("body", b"")
            if not message.get("more_body"):
                done.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    done.set()


def serve_mcp(handler: GuardedHandler, request: Request) -> None:
    """The ``/mcp`` route of the HTTP fakes (see the module docstring)."""
    exchange = _Exchange(handler)
    host, port = handler.server.server_address[:2]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": request.query.encode("latin-1"),
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in handler.headers.items()],
        "client": handler.client_address[:2],
        "server": (str(host), int(port)),
    }
    token = _current.set(exchange)
    try:
        anyio.run(_run, scope, request.body, exchange)
    finally:
        _current.reset(token)
    if exchange.ending == "reset":
        raise Reset("mcp")
    if exchange.ending == "hang_up":
        handler.hang_up()
        return
    handler.send_response(exchange.status)
    for name, value in exchange.headers:
        if name.lower() not in (b"content-length", b"connection"):
            handler.send_header(name.decode("latin-1"), value.decode("latin-1"))
    handler.send_header("Content-Length", str(len(exchange.body)))
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler.end_headers()
    if request.method != "HEAD":
        handler.wfile.write(bytes(exchange.body))
