"""``killdrill audit URL``: four read-only questions to an effect log written by a ResultStore.

1. Was anything done twice?  Keys with more than one *fresh* success in the event log.
2. Are the keys stable?  Logical operations (thread, node, occurrence; or thread, node,
   payload hash) that were claimed under more than one key.
3. How often do retries hit the store?  Replayed vs fresh successes.
4. Is anything stuck?  Keys in flight for longer than a threshold (a killed worker that
   nobody resumed, or a reconciliation that never ran).

The connection is read-only (SQLite opened ``mode=ro``, PostgreSQL ``READ ONLY``
transactions), so it is safe to point at a production effect log.
Exit codes: 0 clean, 1 findings, 2 bad usage or an unreadable log (one line on stderr).

Layer: beside verdict and process; may import ``effects`` and ``errors``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from killdrill.audit.findings import (
    AuditError,
    AuditReport,
    DuplicateSuccess,
    MultiKeyOperation,
    ReplayStats,
    StuckInFlight,
)

__all__ = [
    "AuditError",
    "AuditReport",
    "DuplicateSuccess",
    "MultiKeyOperation",
    "ReplayStats",
    "StuckInFlight",
    "add_parser",
    "audit",
    "main",
]

DEFAULT_IN_FLIGHT_THRESHOLD_S = 300.0


def audit(
    url: str | os.PathLike[str],
    *,
    in_flight_threshold_s: float = DEFAULT_IN_FLIGHT_THRESHOLD_S,
    now: float | None = None,
) -> AuditReport:
    """Run the four queries over the effect log at ``url`` (read-only)."""
    from killdrill.audit import _queries

    return _queries.run(os.fspath(url), in_flight_threshold_s, time.time() if now is None else now)


# --------------------------------------------------------------------------- CLI


def _handler(args: argparse.Namespace) -> int:
    if args.in_flight_threshold < 0:
        print("killdrill audit: --in-flight-threshold must be >= 0", file=sys.stderr)
        return 2
    try:
        report = audit(args.url, in_flight_threshold_s=args.in_flight_threshold)
    except AuditError as exc:
        print(f"killdrill audit: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            print(f"killdrill audit: cannot write {args.json}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0 if report.ok else 1


def add_parser(subparsers: Any) -> None:
    """Register ``audit`` on an argparse subparsers object; the handler is ``args.func(args) -> int``."""
    p = subparsers.add_parser(
        "audit",
        help="read-only audit of an effect log (duplicates, unstable keys, replays, stuck claims)",
        description=_plain_help(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", help="SQLAlchemy URL or SQLite file path of a ResultStore's effect log")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    p.add_argument(
        "--in-flight-threshold",
        type=float,
        default=DEFAULT_IN_FLIGHT_THRESHOLD_S,
        metavar="SECONDS",
        help=f"report keys in flight longer than this (default {DEFAULT_IN_FLIGHT_THRESHOLD_S:g})",
    )
    p.set_defaults(func=_handler)


def _plain_help(doc: str) -> str:
    """The module docstring as ``--help`` text: no reStructuredText markup (````x```` is x), and
    without the paragraph for the package's maintainers (its layer)."""
    keep = [p for p in doc.strip().split("\n\n") if not p.startswith("Layer:")]
    import re

    return re.sub(r"\*(\w[^*]*)\*", r"\1", "\n\n".join(keep).replace("``", ""))


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, no usage dump
        self.exit(2, f"killdrill audit: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m killdrill.audit URL [--json FILE]`` (the same as ``killdrill audit``)."""
    parser = _OneLineParser(prog="killdrill")
    sub = parser.add_subparsers(dest="command", parser_class=_OneLineParser)
    add_parser(sub)
    args = parser.parse_args(["audit", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))
