"""The four read-only queries of ``killdrill audit``, in SQLAlchemy (imported only when an
audit runs: the CLI that offers the subcommand does not pay for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from killdrill.audit.findings import (
    AuditError,
    AuditReport,
    DuplicateSuccess,
    MultiKeyOperation,
    ReplayStats,
    StuckInFlight,
)
from killdrill.effects import (
    EV_RECONCILED,
    EV_REPLAYED,
    EV_SUCCEEDED,
    EVENTS_TABLE,
    IN_FLIGHT,
    STATES_TABLE,
    sqlalchemy_url,
)


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


def run(url: str, in_flight_threshold_s: float, now: float) -> AuditReport:
    """Run the four queries over the effect log at ``url`` (read-only)."""
    engine, shown = _read_only_engine(url)
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
