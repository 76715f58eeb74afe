"""Effects in the agent's own database: the rows of the tables the user names
(``--effect-table 'receipts(order_id)'``), read from the database the agent really writes
(``--effect-db URL``) after each run and given to the verdict as calls of provider
``db:TABLE``, op ``insert``, outcome ``created``: a second row for one order is a
``duplicate_effect``, a row the baseline has and the case lacks a ``missing_effect``.

Nothing is installed in the user's database (no trigger, no extension): the drill only reads.
Each run sees its own rows only.  SQLite: the URL names a file in ``{workdir}``, so every run
has its own database, removed with its workdir.  PostgreSQL: every run gets a schema of its
own, ``kd_fx_<pid>_<hex>``, created before its first launch and dropped (``CASCADE``) when the
run is released; the agent's connections land in it through libpq's ``PGOPTIONS``
(``-c search_path=...``: psycopg, psycopg2 and every ORM on them, untouched), and
``KILLDRILL_EFFECT_DB`` (the URL with ``options=-csearch_path=...``) and
``KILLDRILL_EFFECT_SCHEMA`` name it for a driver that reads no ``PGOPTIONS``.  A schema is
claimed by its harness before it is made (``killdrill.ownership``): one a killed harness left is
dropped by the next run on the machine, and a schema of another machine's drill on a shared
server is never touched.

A row's attempt is the attempt after which the drill first saw it (rows are read after every
attempt of a case); ``0`` where no read came between (a deployment's processes run at once).
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import os
import re
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from killdrill import envvars, ownership
from killdrill.canonical import canonical_json
from killdrill.drill.env import fill
from killdrill.drill.workdirs import RunContext, Workdirs
from killdrill.errors import HarnessError, UsageError
from killdrill.providers import ROWS
from killdrill.records import CREATED, Call, LedgerSnapshot

if TYPE_CHECKING:  # imported where effect tables are used: a drill without them never pays for it
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

__all__ = ["INSERT", "EffectRows", "with_rows"]


def _backend(url: str) -> str:
    import sqlalchemy as sa

    return str(sa.engine.make_url(url).get_backend_name())


INSERT = "insert"
"""The op of a row's call: it was written (the drill sees rows, not statements)."""

_SCHEMA_PREFIX = "kd_fx_"
_GENERATED = re.compile(
    r"nextval|now\(|current_(timestamp|date|time)|localtimestamp|clock_timestamp|statement_timestamp"
    r"|transaction_timestamp|gen_random_uuid|uuid_generate|random\(|datetime\(|strftime\(|julianday\(",
    re.I,
)
"""A column default that makes a new value per row: the database's, not the agent's (left out)."""


class EffectRows:
    """The drill's effect tables: the env and schema of each run, and its rows as calls."""

    def __init__(self, tables: Mapping[str, tuple[Sequence[str], str | None]], url: str | None) -> None:
        self.tables = dict(tables)
        self.url = url
        self._lock = threading.Lock()
        self._admin: Engine | None = None
        self._schemas: dict[str, str] = {}  # made and not dropped yet: schema -> its claim
        # workdir -> a row's content -> the attempt after which each of its copies was first seen
        self._seen: dict[str, dict[str, list[int]]] = {}
        self._generated: dict[str, frozenset[str]] = {}  # table -> columns the database fills
        self.postgres = bool(url) and _backend(url or "") == "postgresql"
        if url and not self.postgres and "{workdir}" not in url:
            raise UsageError(
                f"--effect-db {url}: put {{workdir}} in it (sqlite:///{{workdir}}/app.db), so every run"
                " has a database of its own, or use PostgreSQL (a schema per run)"
            )

    @property
    def active(self) -> bool:
        return bool(self.tables) and self.url is not None

    def naming(self) -> dict[str, tuple[str, ...]]:
        """``--identity`` entries for the tables' rows: ``db:receipts.insert -> (order_id,)``."""
        return {f"{ROWS}{name}.{INSERT}": tuple(cols) for name, (cols, _) in self.tables.items() if cols}

    def schema(self, run: RunContext) -> str:
        digest = hashlib.sha1(f"{run.workdir}\0{run.thread}".encode()).hexdigest()[:10]
        return f"{_SCHEMA_PREFIX}{os.getpid()}_{digest}"

    def run_url(self, run: RunContext) -> str:
        """The URL of ``run``'s database as the agent should use it."""
        url = fill([self.url or ""], run.thread, str(run.workdir))[0]
        if not self.postgres:
            return url
        sep = "&" if "?" in url else "?"
        return f"{url}{sep}options=-csearch_path%3D{self.schema(run)}"

    def env(self, run: RunContext) -> dict[str, str]:
        """What a launch in ``run`` is given (names only: :meth:`prepare` makes the schema)."""
        if not self.active:
            return {}
        env = {envvars.EFFECT_DB: self.run_url(run)}
        if self.postgres:
            schema = self.schema(run)
            env.update({envvars.EFFECT_SCHEMA: schema, "PGOPTIONS": f"-c search_path={schema}"})
        return env

    def ledger_url(self, url: str) -> str:
        """The ledger's ``url`` as the agent gets it: a PostgreSQL ledger whose URL names no
        ``options`` keeps the server's default ``search_path`` (where the harness reads it), not
        the run's schema that ``PGOPTIONS`` gives every other connection of the agent."""
        if not (self.active and self.postgres) or not url.startswith("postgres") or "options=" in url:
            return url
        return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D%22%24user%22%2Cpublic"

    def prepare(self, run: RunContext) -> None:
        """Before a launch in ``run``: its schema exists (PostgreSQL), claimed first by this
        harness (``killdrill.ownership``: a harness killed before the release leaves it to the
        next run's sweep, which drops only what a dead harness of this machine claimed)."""
        if not (self.active and self.postgres):
            return
        import sqlalchemy as sa

        schema = self.schema(run)
        with self._lock:
            if schema in self._schemas:
                return
            self._schemas[schema] = ownership.claim(ownership.POSTGRES_SCHEMA, url=self.url, schema=schema)
        try:
            with self._engine().begin() as conn:
                conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        except sa.exc.SQLAlchemyError as exc:
            raise HarnessError(f"--effect-db: cannot make the run's schema {schema}: {_short(exc)}") from None

    def observe(self, run: RunContext, attempt: int) -> None:
        """After attempt ``attempt`` of ``run``: its rows not seen before are that attempt's."""
        if not self.active:
            return
        try:
            rows = self._read(run)
        except HarnessError:
            return  # not there yet (a kill before the table was made): the final read says
        seen = self._seen.setdefault(str(run.workdir), {})
        counts: dict[str, int] = {}
        for name, table_rows in rows.items():
            for row in table_rows:
                content = canonical_json([name, row])
                counts[content] = counts.get(content, 0) + 1
                copies = seen.setdefault(content, [])
                copies.extend([attempt] * (counts[content] - len(copies)))

    def read(self, run: RunContext, *, clean: bool = False) -> list[Call]:
        """``run``'s rows as calls (their ``seq`` counted from 1: :func:`with_rows` places them after
        the ledger's).  ``clean``: a clean run, whose tables must exist (a name that is not one
        is the user's mistake) and whose rows are its one attempt's."""
        if not self.active:
            return []
        rows = self._read(run, must_exist=clean)
        seen = self._seen.pop(str(run.workdir), {})
        subs = Workdirs.written_as(run)
        now = time.time()
        calls: list[Call] = []
        counts: dict[str, int] = {}
        for name, table_rows in rows.items():
            cols = self.tables[name][0]
            for row in table_rows:
                content = canonical_json([name, row])
                n = counts[content] = counts.get(content, 0) + 1
                copies = seen.get(content, [])
                attempt = copies[n - 1] if n <= len(copies) else 1 if clean else 0
                ident = ",".join(str(row.get(c)) for c in cols) if cols else None
                payload = {k: _written_as(v, subs) for k, v in row.items()}
                effect = _written_as(ident, subs) if ident is not None else None
                provider = f"{ROWS}{name}"
                calls.append(
                    Call(len(calls) + 1, provider, INSERT, None, payload, CREATED, effect, attempt, 0, now)
                )
        return calls

    def release(self, run: RunContext) -> None:
        """``run`` is over: its schema is dropped with everything in it (PostgreSQL)."""
        self._seen.pop(str(run.workdir), None)
        if not (self.active and self.postgres):
            return
        import sqlalchemy as sa

        schema = self.schema(run)
        with self._lock:
            claim = self._schemas.pop(schema, None)
        if claim is None:
            return
        try:
            with self._engine().begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        except sa.exc.SQLAlchemyError:
            return  # the claim stays: swept by the next run once this harness is gone
        ownership.release(claim)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.dispose()
            self._admin = None

    def _engine(self) -> Engine:
        import sqlalchemy as sa

        with self._lock:
            if self._admin is None:
                self._admin = sa.create_engine(self.url or "", pool_size=2, max_overflow=8)
            return self._admin

    def _read(self, run: RunContext, must_exist: bool = False) -> dict[str, list[dict[str, Any]]]:
        """Every effect table's rows in ``run``'s database (values JSON can hold, without the
        columns the database fills: an auto-increment id, a ``now()`` default)."""
        import sqlalchemy as sa
        from sqlalchemy.pool import NullPool

        out: dict[str, list[dict[str, Any]]] = {}
        url = self.run_url(run)
        if self.postgres:
            engine, schema = self._engine(), self.schema(run)
        else:
            path = sa.engine.make_url(url).database
            if not path or not os.path.exists(path):
                if must_exist:
                    raise HarnessError(f"--effect-db: the clean run made no database at {url}")
                return {name: [] for name in self.tables}
            engine, schema = sa.create_engine(url, poolclass=NullPool), None
        try:
            with engine.connect() as conn:
                if schema is not None:
                    conn.exec_driver_sql(f'SET search_path TO "{schema}"')
                known = set(sa.inspect(conn).get_table_names(schema=schema))
                for name, (cols, query) in self.tables.items():
                    if query is None and name not in known:
                        if must_exist:
                            raise HarnessError(
                                f"--effect-table {name}: the clean run left no table {name!r} in {url}"
                                f" (its tables: {', '.join(sorted(known)) or 'none'})"
                            )
                        out[name] = []
                        continue
                    sql = query or f'SELECT * FROM "{name}"'
                    rows = [dict(r) for r in conn.execute(sa.text(sql)).mappings()]
                    drop = self._generated_columns(conn, name, schema, cols) if query is None else frozenset()
                    out[name] = [{k: _plain(v) for k, v in r.items() if k not in drop} for r in rows]
                if schema is not None:
                    conn.rollback()
        except sa.exc.SQLAlchemyError as exc:
            raise HarnessError(f"--effect-db: cannot read the effect rows of {url}: {_short(exc)}") from None
        finally:
            if schema is None:
                engine.dispose()
        return out

    def _generated_columns(
        self, conn: sa.Connection, table: str, schema: str | None, identity: Sequence[str]
    ) -> frozenset[str]:
        """The columns of ``table`` whose values the database makes (never an identity column)."""
        import sqlalchemy as sa

        found = self._generated.get(table)
        if found is None:
            inspector = sa.inspect(conn)
            columns = inspector.get_columns(table, schema=schema)
            pk = inspector.get_pk_constraint(table, schema=schema).get("constrained_columns") or []
            names = set()
            for c in columns:
                default = str(c.get("default") or "")
                integer_pk = pk == [c["name"]] and isinstance(c["type"], sa.Integer)
                if integer_pk or c.get("identity") or _GENERATED.search(default):
                    names.add(c["name"])
            found = self._generated[table] = frozenset(names - set(identity))
        return found


def with_rows(snap: LedgerSnapshot, rows: Sequence[Call]) -> LedgerSnapshot:
    """``snap`` with ``rows`` (:meth:`EffectRows.read`) after its last call."""
    if not rows:
        return snap
    last = max((c.seq for c in snap.calls), default=0)
    moved = tuple(Call(**{**c.__dict__, "seq": last + c.seq}) for c in rows)
    return LedgerSnapshot(calls=(*snap.calls, *moved), state=snap.state, in_flight=snap.in_flight)


def _plain(value: Any) -> Any:
    """A column's value as JSON holds it (the ledger's payloads are JSON)."""
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _written_as(value: Any, subs: Mapping[str, str]) -> Any:
    """A row's value with the run's thread and workdir written as ``{thread}``/``{workdir}``."""
    if isinstance(value, str):
        for old, new in subs.items():
            value = value.replace(old, new)
    return value


def _short(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
