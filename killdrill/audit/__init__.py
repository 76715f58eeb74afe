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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from killdrill.errors import UsageError

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


class AuditError(UsageError):
    """The log cannot be audited (bad URL, no such file, not a killdrill effect log)."""


@dataclass(frozen=True)
class DuplicateSuccess:
    key: str
    successes: int
    thread: str | None
    node: str | None
    attempts: list[int | None]
    owners: list[str | None]


@dataclass(frozen=True)
class MultiKeyOperation:
    by: str  # "operation" (thread, node, occurrence) or "payload" (thread, node, payload hash)
    thread: str | None
    node: str | None
    occurrence: int | None
    payload_hash: str | None
    keys: list[str]


@dataclass(frozen=True)
class ReplayStats:
    fresh: int
    replayed: int
    reconciled: int
    keys: int
    ratio: float | None  # replayed / fresh; None when nothing succeeded fresh


@dataclass(frozen=True)
class StuckInFlight:
    key: str
    thread: str | None
    node: str | None
    attempt: int | None
    owner: str | None
    age_s: float


@dataclass(frozen=True)
class AuditReport:
    url: str
    in_flight_threshold_s: float
    duplicates: list[DuplicateSuccess] = field(default_factory=list)
    multi_key: list[MultiKeyOperation] = field(default_factory=list)
    stats: ReplayStats = field(default_factory=lambda: ReplayStats(0, 0, 0, 0, None))
    stuck: list[StuckInFlight] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No finding.  The replay ratio is a figure, not a finding."""
        return not (self.duplicates or self.multi_key or self.stuck)

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "ok": self.ok,
            "in_flight_threshold_s": self.in_flight_threshold_s,
            "duplicate_successes": [asdict(d) for d in self.duplicates],
            "multi_key_operations": [asdict(m) for m in self.multi_key],
            "replay_stats": asdict(self.stats),
            "stuck_in_flight": [asdict(s) for s in self.stuck],
        }

    def text(self) -> str:
        s = self.stats
        ratio = "n/a" if s.ratio is None else f"{s.ratio:.2f}"
        lines = [
            f"killdrill audit of {self.url}",
            f"{'check':<34} {'findings':>8}",
            f"{'keys with >1 fresh success':<34} {len(self.duplicates):>8}",
            f"{'operations with >1 key':<34} {len(self.multi_key):>8}",
            f"{'in flight > ' + format(self.in_flight_threshold_s, 'g') + 's':<34} {len(self.stuck):>8}",
            f"replayed/fresh: {s.replayed}/{s.fresh} (ratio {ratio}), "
            f"reconciled {s.reconciled}, keys {s.keys}",
        ]
        for d in self.duplicates:
            lines.append(
                f"  DUPLICATE {d.key} ({d.node}, thread {d.thread}): {d.successes} fresh successes, "
                f"attempts {d.attempts}"
            )
        for m in self.multi_key:
            what = f"occurrence {m.occurrence}" if m.by == "operation" else f"payload {m.payload_hash}"
            lines.append(f"  KEY CHANGED {m.node} ({what}, thread {m.thread}): {len(m.keys)} keys {m.keys}")
        for st in self.stuck:
            lines.append(
                f"  STUCK {st.key} ({st.node}, thread {st.thread}): in flight {st.age_s:.0f}s, "
                f"attempt {st.attempt}, owner {st.owner}"
            )
        lines.append("clean" if self.ok else "findings: see above")
        return "\n".join(lines)


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
