"""``python -m killdrill.fakes.mcp``: the counting MCP server over stdio, or the counting proxy.

    python -m killdrill.fakes.mcp [--ledger PATH]
    python -m killdrill.fakes.mcp --proxy NAME [--key TOOL=ARG ...] [--result TOOL=FIELD ...] -- CMD [ARG ...]

In a drill the ledger, thread and attempt come from the supervisor's environment (as for every
fake), or from the agent's when its MCP client stripped the server's (killdrill.fakes.locate);
``--ledger`` is for a run by hand (``{KILLDRILL_LEDGER}`` in it is the drill's).  A mistake, or a
drill whose ledger cannot be found, is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys

from killdrill import envvars
from killdrill.errors import install_hint
from killdrill.fakes.locate import DrillNotFound


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m killdrill.fakes.mcp",
        description="Serve killdrill's counting fakes as MCP tools over stdio, or count the tools/call"
        " requests of your own stdio MCP server (--proxy NAME -- CMD...).",
    )
    parser.add_argument("--ledger", help=f"ledger path or URL (default: ${envvars.LEDGER})")
    parser.add_argument("--proxy", metavar="NAME", help="record CMD's tool calls as provider NAME")
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="TOOL=ARG",
        help="with --proxy: TOOL's argument ARG is the call's idempotency key (repeatable)",
    )
    parser.add_argument(
        "--result",
        action="append",
        default=[],
        metavar="TOOL=FIELD",
        help="with --proxy: TOOL's answer field FIELD (booking_id, booking.id) names what the call did:"
        " an answer naming a recorded one is a replay (repeatable)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="with --proxy: -- CMD [ARG ...]")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        if args.proxy is not None:
            from killdrill.fakes.mcp.proxy import parse_keys, run_proxy

            results = parse_keys(args.result, "--result")
            return run_proxy(args.proxy, parse_keys(args.key), command, ledger=args.ledger, results=results)
        if command or args.key or args.result:
            raise ValueError("a command, --key and --result go with --proxy NAME")
        return _serve_stdio(args.ledger)
    except ImportError as exc:
        if not (exc.name or "").startswith(("mcp", "anyio")):
            raise
        print(
            f"killdrill: the counting MCP server needs the mcp package: {install_hint('mcp')}",
            file=sys.stderr,
        )
        return 2
    except ValueError as exc:
        print(f"killdrill: {exc}", file=sys.stderr)
        return 2
    except DrillNotFound as exc:
        print(exc, file=sys.stderr)
        return 2


def _serve_stdio(ledger: str | None) -> int:
    import anyio

    from killdrill.agent import in_runtime
    from killdrill.fakes import connect
    from killdrill.fakes.mcp.server import run_stdio
    from killdrill.fakes.mcp.tools import call_tool

    fakes = connect(ledger)

    def invoke(tool, arguments, context):  # type: ignore[no-untyped-def]
        if context is None:
            return call_tool(fakes.provider(tool.provider), tool, arguments)
        with in_runtime(**context):  # the caller's runtime context, recorded with the call
            return call_tool(fakes.provider(tool.provider), tool, arguments)

    anyio.run(run_stdio, invoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
