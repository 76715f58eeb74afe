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

import sqlalchemy as sa

from killdrill.effects import (
    EV_RECONCILED,
    EV_REPLAYED,
    EV_SUCCEEDED,
    EVENTS_TABLE,
    IN_FLIGHT,
    STATES_TABLE,
    sqlalchemy_url,
)
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


def _read_only_engine(url: str) -> tuple[sa.Engine, str]:
    """An engine that cannot write, and the URL to show (password hidden)."""
    surl = sqlalchemy_url(url)
    try:
        parsed = sa.make_url(surl)
    except sa.exc.ArgumentError as exc:
        raise AuditError(f"not a database URL: {url!r}") from exc
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        if not path or path == ":memory:" or not Path(path).is_file():
            raise AuditError(f"no SQLite effect log at {path or url!r}")
        ro = f"file:{Path(path).resolve()}?mode=ro"
        engine = sa.create_engine("sqlite://", creator=lambda: _sqlite_ro(ro))
        return engine, shown
    try:
        engine = sa.create_engine(surl)
    except Exception as exc:  # unknown dialect, missing driver
        raise AuditError(f"cannot open {shown}: {exc.__class__.__name__}: {exc}") from exc

    if parsed.get_backend_name() == "postgresql":

        @sa.event.listens_for(engine, "begin")
        def _ro(conn: sa.Connection) -> None:
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")

    return engine, shown


def _sqlite_ro(uri: str) -> Any:
    import sqlite3

    return sqlite3.connect(uri, uri=True, timeout=30)


def audit(
    url: str | os.PathLike[str],
    *,
    in_flight_threshold_s: float = DEFAULT_IN_FLIGHT_THRESHOLD_S,
    now: float | None = None,
) -> AuditReport:
    """Run the four queries over the effect log at ``url`` (read-only)."""
    engine, shown = _read_only_engine(os.fspath(url))
    now = time.time() if now is None else now
    try:
        with engine.connect() as conn:
            names = set(sa.inspect(conn).get_table_names())
            if not {STATES_TABLE, EVENTS_TABLE} <= names:
                raise AuditError(
                    f"{shown} holds no killdrill effect log (tables {STATES_TABLE}, {EVENTS_TABLE})"
                )
            md = sa.MetaData()
            st = sa.Table(STATES_TABLE, md, autoload_with=conn)
            ev = sa.Table(EVENTS_TABLE, md, autoload_with=conn)
            return AuditReport(
                url=shown,
                in_flight_threshold_s=in_flight_threshold_s,
                duplicates=_duplicates(conn, ev),
                multi_key=_multi_key(conn, st),
                stats=_stats(conn, st, ev),
                stuck=_stuck(conn, st, now, in_flight_threshold_s),
            )
    except sa.exc.SQLAlchemyError as exc:
        msg = str(exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc).strip().splitlines()[0]
        raise AuditError(f"cannot read {shown}: {msg}") from exc
    finally:
        engine.dispose()


def _duplicates(conn: sa.Connection, ev: sa.Table) -> list[DuplicateSuccess]:
    dup_keys = (
        sa.select(ev.c.key)
        .where(ev.c.event == EV_SUCCEEDED)
        .group_by(ev.c.key)
        .having(sa.func.count() > 1)
        .subquery()
    )
    rows = conn.execute(
        sa.select(ev.c.key, ev.c.thread, ev.c.node, ev.c.attempt, ev.c.owner)
        .where(ev.c.event == EV_SUCCEEDED, ev.c.key.in_(sa.select(dup_keys.c.key)))
        .order_by(ev.c.key, ev.c.id)
    ).all()
    out: dict[str, DuplicateSuccess] = {}
    for r in rows:
        d = out.setdefault(r.key, DuplicateSuccess(r.key, 0, r.thread, r.node, [], []))
        d.attempts.append(r.attempt)
        d.owners.append(r.owner)
    return [
        DuplicateSuccess(d.key, len(d.attempts), d.thread, d.node, d.attempts, d.owners) for d in out.values()
    ]


def _multi_key(conn: sa.Connection, st: sa.Table) -> list[MultiKeyOperation]:
    out: list[MultiKeyOperation] = []
    for by, cols in (
        ("operation", (st.c.thread, st.c.node, st.c.occurrence)),
        ("payload", (st.c.thread, st.c.node, st.c.payload_hash)),
    ):
        groups = conn.execute(
            sa.select(*cols)
            .where(*(c.is_not(None) for c in cols))
            .group_by(*cols)
            .having(sa.func.count(sa.distinct(st.c.key)) > 1)
            .order_by(*cols)
        ).all()
        for g in groups:
            keys = conn.execute(
                sa.select(st.c.key)
                .where(*(c == v for c, v in zip(cols, g, strict=True)))
                .order_by(st.c.created_at, st.c.key)
            ).scalars()
            out.append(
                MultiKeyOperation(
                    by=by,
                    thread=g[0],
                    node=g[1],
                    occurrence=g[2] if by == "operation" else None,
                    payload_hash=g[2] if by == "payload" else None,
                    keys=list(keys),
                )
            )
    return out


def _stats(conn: sa.Connection, st: sa.Table, ev: sa.Table) -> ReplayStats:
    rows = conn.execute(
        sa.select(ev.c.event, sa.func.count())
        .where(ev.c.event.in_([EV_SUCCEEDED, EV_REPLAYED, EV_RECONCILED]))
        .group_by(ev.c.event)
    ).all()
    counts: dict[str, int] = {event: int(n) for event, n in rows}
    keys = conn.execute(sa.select(sa.func.count()).select_from(st)).scalar_one()
    fresh, replayed = counts.get(EV_SUCCEEDED, 0), counts.get(EV_REPLAYED, 0)
    return ReplayStats(
        fresh=fresh,
        replayed=replayed,
        reconciled=counts.get(EV_RECONCILED, 0),
        keys=int(keys),
        ratio=(replayed / fresh) if fresh else None,
    )


def _stuck(conn: sa.Connection, st: sa.Table, now: float, threshold: float) -> list[StuckInFlight]:
    rows = conn.execute(
        sa.select(st)
        .where(st.c.status == IN_FLIGHT, st.c.updated_at < now - threshold)
        .order_by(st.c.updated_at, st.c.key)
    ).mappings()
    return [
        StuckInFlight(r["key"], r["thread"], r["node"], r["attempt"], r["owner"], now - r["updated_at"])
        for r in rows
    ]


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
        description=__doc__.split("\n\n")[0] if __doc__ else None,
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


if __name__ == "__main__":
    sys.exit(main())
