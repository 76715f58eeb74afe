"""The counting MCP server on the official ``mcp`` SDK: the fakes' tools over any transport.

One low-level ``mcp.server.lowlevel.Server`` lists :func:`killdrill.fakes.mcp.tools.tool_specs`
and hands each ``tools/call`` to a synchronous ``invoke`` (run in a worker thread: a call may
block at its ``during:`` point while the supervisor decides).  The transport decides what
``invoke`` is: over stdio the in-process fakes of the agent's attempt (``killdrill.fakes.connect``),
over HTTP the fakes server's binding of the request (:mod:`killdrill.fakes.mcp.http`).  The
low-level server, not ``MCPServer``, because the schemas come from the providers' declarations,
not from Python functions written for the tools.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import IO, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from killdrill.agent import CONTEXT_META
from killdrill.fakes.mcp.tools import MAX_LINE, ToolCallError, ToolSpec, check_arguments, tool_specs

__all__ = ["MAX_LINE", "Invoke", "build_server", "call_context", "run_stdio"]

Invoke = Callable[[ToolSpec, Mapping[str, Any] | None, dict[str, Any] | None], tuple[bool, dict[str, Any]]]
"""Run one tool call (its tool, arguments and the caller's runtime context): ``(ok, body)`` (see
:func:`killdrill.fakes.mcp.tools.call_tool`)."""


def call_context(meta: Any) -> dict[str, Any] | None:
    """The runtime context a ``tools/call`` carried in its ``_meta`` (``killdrill.agent.CONTEXT_META``,
    added by the agent's bootstrap), None when it carried none or not an object."""
    context = meta.get(CONTEXT_META) if isinstance(meta, Mapping) else None
    return dict(context) if isinstance(context, Mapping) and context else None


def _tool(spec: ToolSpec) -> types.Tool:
    hints = spec.annotations
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=dict(spec.input_schema),
        annotations=types.ToolAnnotations(
            title=f"{spec.provider}.{spec.op}",
            read_only_hint=hints.get("readOnlyHint"),
            destructive_hint=hints.get("destructiveHint"),
            idempotent_hint=hints.get("idempotentHint"),
            open_world_hint=hints.get("openWorldHint"),
        ),
    )


def build_server(invoke: Invoke) -> Server[Any]:
    """The fakes' MCP server; each ``tools/call`` goes to ``invoke`` in a worker thread."""
    tools = tool_specs()
    listed = types.ListToolsResult(tools=[_tool(t) for t in tools.values()])

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            tool = check_arguments(params.name, params.arguments, tools)
        except ToolCallError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        context = call_context(params.meta)
        ok, body = await anyio.to_thread.run_sync(invoke, tool, params.arguments, context)
        text = json.dumps(body, sort_keys=True, default=str)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=body,
            is_error=not ok,
        )

    return Server("killdrill-fakes", on_list_tools=list_tools, on_call_tool=call_tool)


def _error(id_: Any, code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}).encode()


def _skip_line(stdin: IO[bytes]) -> None:
    """Discard the rest of an over-long line, a chunk at a time (never held whole)."""
    while True:
        chunk = stdin.readline(1 << 16)
        if not chunk or chunk.endswith(b"\n"):
            return


def _check(line: bytes) -> SessionMessage | bytes:
    """The message of one line, or the JSON-RPC error that answers it: the SDK's stdio reader
    drops a line it cannot parse unanswered, and Python's parser is bounded here (a 100k-deep
    object is a ``RecursionError``, answered as a parse error)."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return _error(None, types.PARSE_ERROR, "parse error: not a JSON-RPC message")
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except Exception:
        id_ = doc.get("id") if isinstance(doc, dict) and isinstance(doc.get("id"), (str, int)) else None
        return _error(id_, types.INVALID_REQUEST, "invalid request: not a JSON-RPC 2.0 message")


@asynccontextmanager
async def _guarded_stdio(stdin: IO[bytes], stdout: IO[bytes]) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport with a hostile client's lines answered, not dropped or buffered:
    each line at most :data:`MAX_LINE` bytes, a line that is not JSON-RPC answered with an error."""
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    lock = anyio.Lock()

    async def emit(data: bytes) -> None:
        async with lock:
            await anyio.to_thread.run_sync(lambda: (stdout.write(data + b"\n"), stdout.flush()))

    async def reader() -> None:
        async with read_writer:
            while True:
                line = await anyio.to_thread.run_sync(stdin.readline, MAX_LINE + 1)
                if not line:
                    return
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    await anyio.to_thread.run_sync(_skip_line, stdin)
                    await emit(_error(None, types.INVALID_REQUEST, f"message larger than {MAX_LINE} bytes"))
                    continue
                if not line.strip():
                    continue
                checked = _check(line)
                if isinstance(checked, bytes):
                    await emit(checked)
                else:
                    await read_writer.send(checked)

    async def writer() -> None:
        async with write_reader:
            async for message in write_reader:
                await emit(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode())

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        yield read_stream, write_stream
        tg.cancel_scope.cancel()


async def run_stdio(invoke: Invoke) -> None:
    """Serve the tools over this process's stdin and stdout until the client closes them."""
    server = build_server(invoke)
    async with _guarded_stdio(sys.stdin.buffer, sys.stdout.buffer) as (read, write):
        await server.run(read, write, server.create_initialization_options())
