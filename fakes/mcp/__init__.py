"""The fakes over MCP: a counting MCP server and a counting proxy for a user's own MCP server.

``python -m killdrill.fakes.mcp`` serves every fake operation as a tool ``PROVIDER_OP`` over
stdio (the command an agent's MCP configuration launches); with ``--http-fakes`` the same tools
answer at ``$KILLDRILL_FAKES_URL/mcp`` (streamable HTTP, :mod:`killdrill.fakes.mcp.http`).
``python -m killdrill.fakes.mcp --proxy NAME [--key TOOL=ARG] [--result TOOL=FIELD] -- CMD...``
runs the user's stdio server behind a proxy that records every ``tools/call`` as provider ``NAME``
(:mod:`killdrill.fakes.mcp.proxy`).  Every call is in the ledger before its answer leaves, and
announces ``during:PROVIDER.OP`` in between, as every fake does.

Modules: ``tools`` (the tools from the providers' declarations; standard library),
``server`` (the SDK's low-level server; stdio), ``http`` (the fakes server's ``/mcp`` route),
``proxy`` (the counting proxy; standard library).  Only ``server`` and ``http`` import ``mcp``
(extra ``killdrill[mcp]``): importing this package does not.
"""

from __future__ import annotations
