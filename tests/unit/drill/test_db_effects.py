"""The effect rows of a run's own database (killdrill.drill.db_effects), on a SQLite file: the
columns the database fills left out, values as JSON holds them, each row's attempt, the thread
written as ``{thread}``, a query's rows, and the options' forms."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from killdrill.drill.db_effects import EffectRows, with_rows
from killdrill.drill.workdirs import RunContext
from killdrill.errors import HarnessError, UsageError
from killdrill.options import DrillOptions, OptionError
from killdrill.options.db_effects import join_table, split_table
from killdrill.records import Call, LedgerSnapshot
from killdrill.verdict import EffectNaming, judge
from killdrill.verdict.diagnosis import diagnose

URL = "sqlite:///{workdir}/app.db"
SCHEMA = """CREATE TABLE receipts (id INTEGER PRIMARY KEY, order_id TEXT, amount NUMERIC,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, note BLOB)"""


def database(run: RunContext) -> sqlite3.Connection:
    conn = sqlite3.connect(run.workdir / "app.db", isolation_level=None)
    conn.execute(SCHEMA)
    return conn


def insert(conn: sqlite3.Connection, order: str, amount: object = 4200) -> None:
    conn.execute("INSERT INTO receipts (order_id, amount, note) VALUES (?, ?, ?)", (order, amount, b"\x01"))


@pytest.fixture
def run(tmp_path: Path) -> RunContext:
    return RunContext(tmp_path, "kd-t1")


def test_the_options_forms() -> None:
    assert split_table(" receipts ( order_id , cycle ) ") == ("receipts", (("order_id", "cycle"), None))
    assert split_table("paid(order_id)=SELECT * FROM r") == ("paid", (("order_id",), "SELECT * FROM r"))
    assert split_table("receipts") == ("receipts", ((), None))
    assert join_table("paid", (("a", "b"), "SELECT 1")) == "paid(a,b)=SELECT 1"
    for bad in ("receipts(order id)", "1x(a)", "paid(a)="):
        with pytest.raises(OptionError, match="expected TABLE"):
            split_table(bad)
    with pytest.raises(OptionError, match="effect_db= needs effect_table="):
        DrillOptions(effect_db=URL)
    with pytest.raises(UsageError, match=r"\{workdir\}"):
        EffectRows({"receipts": (("order_id",), None)}, "sqlite:////tmp/shared.db")


def test_postgresql_runs_get_a_schema_and_the_ledger_keeps_its_own(run: RunContext) -> None:
    rows = EffectRows({"receipts": (("order_id",), None)}, "postgresql+psycopg://app@db/shop")
    env = rows.env(run)
    schema = env["KILLDRILL_EFFECT_SCHEMA"]
    assert schema.startswith("kd_fx_") and env["PGOPTIONS"] == f"-c search_path={schema}"
    assert env["KILLDRILL_EFFECT_DB"] == f"postgresql+psycopg://app@db/shop?options=-csearch_path%3D{schema}"
    assert rows.schema(RunContext(run.workdir, "kd-t2")) != schema  # a clean run of another thread
    # a shared PostgreSQL ledger is not moved into the run's schema by PGOPTIONS
    pinned = rows.ledger_url("postgresql://h/ledger")
    assert pinned == "postgresql://h/ledger?options=-csearch_path%3D%22%24user%22%2Cpublic"
    assert rows.ledger_url("postgresql://h/l?options=-csearch_path%3Dx") == "postgresql://h/l?options=-csearch_path%3Dx"
    assert rows.ledger_url("/w/.killdrill/ledger.sqlite") == "/w/.killdrill/ledger.sqlite"


def test_rows_are_calls_without_the_databases_own_columns(run: RunContext) -> None:
    rows = EffectRows({"receipts": (("order_id",), None)}, URL)
    conn = database(run)
    insert(conn, "kd-t1/order-7", 42.5)
    (call,) = rows.read(run, clean=True)
    seen = (call.provider, call.op, call.key, call.outcome, call.attempt)
    assert seen == ("db:receipts", "insert", None, "created", 1)
    # id (an integer primary key) and created_at (CURRENT_TIMESTAMP) are the database's
    assert call.payload == {"order_id": "{thread}/order-7", "amount": 42.5, "note": "01"}
    assert call.effect_id == "{thread}/order-7"
    assert rows.naming() == {"db:receipts.insert": ("order_id",)}
    assert rows.env(run) == {"KILLDRILL_EFFECT_DB": f"sqlite:///{run.workdir}/app.db"}


def test_each_row_names_the_attempt_after_which_it_appeared(run: RunContext) -> None:
    rows = EffectRows({"receipts": (("order_id",), None)}, URL)
    rows.observe(run, 1)  # no database yet: nothing
    conn = database(run)
    insert(conn, "a")
    rows.observe(run, 1)
    insert(conn, "a")  # the same content again: its second copy
    insert(conn, "b")
    rows.observe(run, 2)
    insert(conn, "c")  # after the last read: not known
    found = [(c.payload["order_id"], c.attempt) for c in rows.read(run)]
    assert found == [("a", 1), ("a", 2), ("b", 2), ("c", 0)]


def test_a_querys_rows_and_a_missing_table(run: RunContext) -> None:
    conn = database(run)
    insert(conn, "a", 1)
    insert(conn, "b", 2)
    paid = EffectRows({"paid": (("order_id",), "SELECT order_id FROM receipts WHERE amount > 1")}, URL)
    assert [c.payload for c in paid.read(run)] == [{"order_id": "b"}]
    missing = EffectRows({"reciepts": (("order_id",), None)}, URL)
    assert missing.read(run) == []  # a case killed before it made the table: no rows
    with pytest.raises(HarnessError, match=r"no table 'reciepts'.*receipts"):
        missing.read(run, clean=True)


def test_two_rows_for_one_order_are_a_duplicate_with_its_cause(run: RunContext) -> None:
    rows = EffectRows({"receipts": (("order_id",), None)}, URL)
    conn = database(run)
    charge = Call(1, "payments", "charge", "k", {"amount": 1}, "created", "ch_1", 1, 10, 0.0)
    insert(conn, "a")
    baseline = with_rows(LedgerSnapshot(calls=(charge,)), rows.read(run, clean=True))
    assert [c.seq for c in baseline.calls] == [1, 2]
    rows.observe(run, 1)
    insert(conn, "a", 4300)  # another amount: still the same order's receipt
    case = with_rows(LedgerSnapshot(calls=(charge,)), rows.read(run))
    naming = EffectNaming(rows.naming())
    (v,) = diagnose(judge(baseline, case, [], naming=naming), baseline=baseline, attempts=[], ledger=case)
    assert (v.kind, v.provider, v.identity) == ("duplicate_effect", "db:receipts", {"order_id": "a"})
    assert v.cause == "row_not_unique"
    assert "a row by attempt 1, a row" in v.message and "unique constraint" in v.fix
