"""The runtime context on the wire: a call the agent makes to the served fakes carries it, as an
in-process call does, so a cause reads the same facts however the effect was sent.

An integration names the code running now with :func:`killdrill.agent.in_runtime` (a DBOS
step, a Temporal activity, a Celery task).  In process the fakes read it from the context
variable; a call over the wire leaves the process, so the agent's bootstrap (with any
integration on) patches, lazily as the agent imports them, the clients the SDKs are built on:

- ``http.client`` (``urllib``, ``urllib3``, ``requests``, the stripe SDK's default client),
  ``httpx`` (the openai SDK, stripe's async client) and ``httpx2`` (the MCP SDK): a request to the HTTP fakes'
  own address (``KILLDRILL_FAKES_URL``'s loopback port) gets ``X-Killdrill-Context: JSON``;
  a request anywhere else is untouched, so the context never leaves for another host;
- ``smtplib``: a message sent to the SMTP fake (``KILLDRILL_SMTP``) gets the same header,
  which the fake removes before it reads the message;
- ``mcp.client.stdio``: a ``tools/call`` sent to ``python -m killdrill.fakes.mcp`` (the counting
  server or proxy) carries the context in its ``_meta`` (``killdrill/context``); over HTTP
  (``$KILLDRILL_FAKES_URL/mcp``) the header does it (the SDK posts in the caller's context).

The header carries nothing secret: the request itself carries the drill's secret, and the fakes
read the header only on a request that passed their guard (a stranger cannot forge a context
any more than an effect).  Outside a runtime context nothing is added.  Standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from killdrill import envvars
from killdrill.agent import CONTEXT_HEADER, CONTEXT_META, wire_context
from killdrill.integrations._imports import PatchOnImport

__all__ = ["activate", "active", "deactivate", "to_fakes"]

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_MARK = "__killdrill_wire__"
_MCP_MODULE = "killdrill.fakes.mcp"
_FOLD = 800  # an SMTP line is at most 998 characters: a longer context is folded


@functools.lru_cache(maxsize=8)
def _address(value: str, url: bool) -> tuple[str, int] | None:
    from urllib.parse import urlsplit  # at the first call to the fakes, not at start

    try:
        if url:
            parts = urlsplit(value)
            return (parts.hostname or "").lower(), int(parts.port or 0)
        host, _, port = value.rpartition(":")
        return host.strip("[]").lower(), int(port)
    except ValueError:
        return None


def to_fakes(var: str, host: object, port: object) -> bool:
    """Whether ``host:port`` is the served fakes' address in ``$var`` (``KILLDRILL_FAKES_URL``,
    a URL, or ``KILLDRILL_SMTP``, ``host:port``): the same port on a loopback name."""
    value = os.environ.get(var)
    if not value or not isinstance(host, str):
        return False
    address = _address(value, var != envvars.SMTP)
    if address is None or not address[1]:
        return False
    name = host.strip("[]").lower()
    return port == address[1] and (name == address[0] or (name in _LOOPBACK and address[0] in _LOOPBACK))


def _marked(fn: Any) -> Any:
    setattr(fn, _MARK, True)
    return fn


# -- http.client -------------------------------------------------------------------------------
def _patch_http_client(module: ModuleType) -> None:
    cls = module.HTTPConnection
    orig = cls.putrequest
    if getattr(orig, _MARK, False):
        return

    @functools.wraps(orig)
    def putrequest(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> None:
        orig(self, method, url, *args, **kwargs)
        value = wire_context()
        tunnel = getattr(self, "_tunnel_host", None)  # through a proxy: another host's request
        if value is not None and not tunnel and to_fakes(envvars.FAKES_URL, self.host, self.port):
            self.putheader(CONTEXT_HEADER, value)

    _HTTP_CLIENT.replace(cls, "putrequest", _marked(putrequest))


# -- httpx -------------------------------------------------------------------------------------
def _stamp(request: Any) -> None:
    value = wire_context()
    if value is None or CONTEXT_HEADER in request.headers:
        return
    url = request.url
    if to_fakes(envvars.FAKES_URL, url.host, url.port):
        request.headers[CONTEXT_HEADER] = value


def _patch_httpx(module: ModuleType, hook: PatchOnImport | None = None) -> None:
    """``httpx`` or its successor ``httpx2`` (the MCP SDK's, same API)."""
    hook = hook or _HTTPX
    sync_send, async_send = module.Client.send, module.AsyncClient.send
    if getattr(sync_send, _MARK, False):
        return

    @functools.wraps(sync_send)
    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        _stamp(request)
        return sync_send(self, request, *args, **kwargs)

    @functools.wraps(async_send)
    async def asend(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        _stamp(request)
        return await async_send(self, request, *args, **kwargs)

    hook.replace(module.Client, "send", _marked(send))
    hook.replace(module.AsyncClient, "send", _marked(asend))


# -- smtplib -----------------------------------------------------------------------------------
def _with_header(msg: Any, value: str) -> Any:
    """``msg`` (str or bytes, as ``sendmail`` takes it) with the context header first."""
    folded = "\r\n ".join(value[i : i + _FOLD] for i in range(0, len(value), _FOLD))
    line = f"{CONTEXT_HEADER}: {folded}\r\n"
    if isinstance(msg, str):
        return line + msg
    if isinstance(msg, (bytes, bytearray)):
        return line.encode("ascii") + bytes(msg)
    return msg


def _patch_smtplib(module: ModuleType) -> None:
    cls = module.SMTP
    orig = cls.sendmail
    if getattr(orig, _MARK, False):
        return

    @functools.wraps(orig)
    def sendmail(self: Any, from_addr: Any, to_addrs: Any, msg: Any, *args: Any, **kwargs: Any) -> Any:
        value = wire_context()
        if value is not None:
            try:
                host, port = self.sock.getpeername()[:2]
            except (AttributeError, OSError, ValueError):
                host, port = None, None
            if to_fakes(envvars.SMTP, host, port):
                msg = _with_header(msg, value)
        return orig(self, from_addr, to_addrs, msg, *args, **kwargs)

    _SMTPLIB.replace(cls, "sendmail", _marked(sendmail))


# -- mcp.client.stdio --------------------------------------------------------------------------
def _with_meta(item: Any) -> Any:
    """A ``tools/call`` session message with the runtime context in its ``_meta``."""
    value = wire_context()
    message: Any = getattr(item, "message", None)
    root: Any = getattr(message, "root", message)  # mcp 1's JSONRPCMessage wraps the request
    if value is None or getattr(root, "method", None) != "tools/call" or not dataclasses.is_dataclass(item):
        return item
    params = dict(getattr(root, "params", None) or {})
    params["_meta"] = {**(params.get("_meta") or {}), CONTEXT_META: json.loads(value)}
    new = root.model_copy(update={"params": params})
    if message is not root:
        new = message.model_copy(update={"root": new})
    return dataclasses.replace(item, message=new)  # type: ignore[type-var]


class _ContextWriter:
    """The write stream of a stdio session with killdrill's MCP server: every ``tools/call``
    sent carries the sender's runtime context (``send`` runs in the caller's task)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def send(self, item: Any) -> None:
        await self._stream.send(_with_meta(item))

    async def __aenter__(self) -> _ContextWriter:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)


def _runs_killdrill_mcp(server: Any) -> bool:
    argv = [str(getattr(server, "command", "")), *map(str, getattr(server, "args", None) or ())]
    return any(_MCP_MODULE in arg for arg in argv)


def _patch_mcp_stdio(module: ModuleType) -> None:
    orig = module.stdio_client
    if getattr(orig, _MARK, False):
        return

    @contextlib.asynccontextmanager
    async def stdio_client(server: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with orig(server, *args, **kwargs) as streams:
            if _runs_killdrill_mcp(server) and isinstance(streams, tuple) and len(streams) >= 2:
                yield (streams[0], _ContextWriter(streams[1]), *streams[2:])
            else:
                yield streams

    functools.update_wrapper(stdio_client, orig)
    _MCP_STDIO.replace(module, "stdio_client", _marked(stdio_client))


_HTTP_CLIENT = PatchOnImport(("http.client",), _patch_http_client)
_HTTPX = PatchOnImport(("httpx",), _patch_httpx)
_HTTPX2: PatchOnImport = PatchOnImport(("httpx2",), lambda module: _patch_httpx(module, _HTTPX2))
_SMTPLIB = PatchOnImport(("smtplib",), _patch_smtplib)
_MCP_STDIO = PatchOnImport(("mcp.client.stdio",), _patch_mcp_stdio)
_HOOKS = (_HTTP_CLIENT, _HTTPX, _HTTPX2, _SMTPLIB, _MCP_STDIO)


def activate() -> None:
    """Patch the clients as the agent imports them (idempotent; imports none of them)."""
    for hook in _HOOKS:
        hook.install()


def active() -> bool:
    return any(hook.active for hook in _HOOKS)


def deactivate() -> None:
    """Put every client back (for in-process tests)."""
    for hook in _HOOKS:
        hook.undo()
