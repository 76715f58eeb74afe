"""The store's SQLAlchemy engine (SQLite ``BEGIN IMMEDIATE`` or PostgreSQL) and its two tables."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

STATES_TABLE = "killdrill_effect_claims"
EVENTS_TABLE = "killdrill_effect_log"


def sqlalchemy_url(url: str | os.PathLike[str]) -> str:
    """Accept a SQLAlchemy URL or a plain file path (an embedded SQLite database)."""
    text = os.fspath(url)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).resolve()}"


def make_engine(url: str | os.PathLike[str], *, immediate: bool = True) -> Engine:
    """An engine for the store.  On SQLite every transaction is ``BEGIN IMMEDIATE``: the write
    lock is taken at the start, so a claim's check and insert cannot interleave with another
    writer, and waiting writers queue on the busy timeout instead of failing to upgrade."""
    surl = sqlalchemy_url(url)
    if not surl.startswith("sqlite"):
        return sa.create_engine(surl, pool_pre_ping=True)
    engine = sa.create_engine(surl, connect_args={"timeout": 60})

    @sa.event.listens_for(engine, "connect")
    def _no_implicit_tx(dbapi_conn: Any, _rec: Any) -> None:
        # Let SQLAlchemy's "begin" event own transaction start (pysqlite would defer BEGIN).
        dbapi_conn.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _tables(metadata: sa.MetaData) -> tuple[sa.Table, sa.Table]:
    states = sa.Table(
        STATES_TABLE,
        metadata,
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("thread", sa.String(255)),
        sa.Column("node", sa.String(255)),
        sa.Column("occurrence", sa.Integer),
        sa.Column("attempt", sa.Integer),
        sa.Column("payload_hash", sa.String(64)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result", sa.Text),
        sa.Column("owner", sa.String(255)),
        sa.Column("replayed", sa.Boolean, nullable=False, default=False),
        sa.Column("replay_count", sa.Integer, nullable=False, default=0),
        sa.Column("claims", sa.Integer, nullable=False, default=1),
        sa.Column("created_at", sa.Float(precision=53), nullable=False),
        sa.Column("updated_at", sa.Float(precision=53), nullable=False),
        sa.Column("completed_at", sa.Float(precision=53)),
    )
    events = sa.Table(
        EVENTS_TABLE,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(255), nullable=False, index=True),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("thread", sa.String(255)),
        sa.Column("node", sa.String(255)),
        sa.Column("occurrence", sa.Integer),
        sa.Column("attempt", sa.Integer),
        sa.Column("payload_hash", sa.String(64)),
        sa.Column("owner", sa.String(255)),
        sa.Column("at", sa.Float(precision=53), nullable=False),
    )
    return states, events
