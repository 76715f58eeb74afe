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
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from killdrill.fakes.mcp.tools import ToolCallError, ToolSpec, check_arguments, tool_specs

__all__ = ["Invoke", "build_server", "run_stdio"]

Invoke = Callable[[ToolSpec, Mapping[str, Any] | None], tuple[bool, dict[str, Any]]]
"""Run one tool call: ``(ok, body)`` (see :func:`killdrill.fakes.mcp.tools.call_tool`)."""


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
        ok, body = await anyio.to_thread.run_sync(invoke, tool, params.arguments)
        text = json.dumps(body, sort_keys=True, default=str)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=body,
            is_error=not ok,
        )

    return Server("killdrill-fakes", on_list_tools=list_tools, on_call_tool=call_tool)


async def run_stdio(invoke: Invoke) -> None:
    """Serve the tools over this process's stdin and stdout until the client closes them."""
    server = build_server(invoke)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
