"""The durable ledger: schema, thread isolation, read API, concurrency, and clear errors."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import pytest

from killdrill.fakes import connect
from killdrill.ledger import LEDGER_FORMAT, Ledger, LedgerError, canonical_json, ledger_path
from killdrill.records import CREATED, LedgerSnapshot

FORK = multiprocessing.get_context("fork")


def test_plain_path_creates_the_sqlite_file_and_its_directory(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "ledger.sqlite"
    ledger = Ledger(str(path), "t1")
    assert path.is_file()
    assert ledger.path == str(path)
    assert ledger.snapshot() == LedgerSnapshot()
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_in_workdir_uses_ledger_path(tmp_path: Path) -> None:
    assert ledger_path(tmp_path) == str(tmp_path / ".killdrill" / "ledger.sqlite")
    ledger = Ledger.in_workdir(tmp_path, "t1")
    assert ledger.path == ledger_path(tmp_path)
    assert Path(ledger_path(tmp_path)).is_file()


def test_sqlalchemy_url_is_accepted(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'via-url.sqlite'}", "t1")
    assert ledger.path == str(tmp_path / "via-url.sqlite")
    connect(ledger).kv.set("a", 1)
    assert Ledger(str(tmp_path / "via-url.sqlite"), "t1").snapshot().state == {"a": 1}


def test_engine_is_cached_per_url(tmp_path: Path) -> None:
    a = Ledger(str(tmp_path / "l.sqlite"), "t1")
    b = Ledger(str(tmp_path / "l.sqlite"), "t2")
    assert a.db is b.db
    started = time.perf_counter()
    for _ in range(20):
        Ledger(str(tmp_path / "l.sqlite"), "t3")
    # Reopening is a dictionary lookup, not a new engine + schema check (agents do it every start).
    assert (time.perf_counter() - started) / 20 < 0.005


def test_threads_never_see_each_other(tmp_path: Path) -> None:
    url = str(tmp_path / "shared.sqlite")
    one, two = connect(url, thread="one"), connect(url, thread="two")
    one.payments.charge(idempotency_key="k", amount=1)
    two.payments.charge(idempotency_key="k", amount=2)  # same key, other thread: not a reuse
    one.kv.set("x", "one")
    assert [c.payload for c in one.ledger.calls()] == [{"amount": 1}, {"key": "x", "value": "one"}]
    assert [c.payload for c in two.ledger.calls()] == [{"amount": 2}]
    assert two.ledger.snapshot().state == {}
    assert [c.seq for c in two.ledger.calls()] == [1]
    assert two.payments.lookup("k")["amount"] == 2


def test_snapshot_and_calls_filters(tmp_path: Path) -> None:
    fakes = connect(str(tmp_path / "l.sqlite"), thread="t", attempt=3)
    fakes.payments.charge(idempotency_key="c1", amount=5, currency="usd")
    fakes.mailbox.send(to="a@x", subject="s", body="b", ref="r")
    fakes.kv.set("status", {"done": True})
    fakes.kv.set("status", {"done": False})
    fakes.payments.refund("ch_0001")
    snap = fakes.ledger.snapshot()
    assert [(c.seq, c.provider, c.op) for c in snap.calls] == [
        (1, "payments", "charge"),
        (2, "mailbox", "send"),
        (3, "kv", "set"),
        (4, "kv", "set"),
        (5, "payments", "refund"),
    ]
    first = snap.calls[0]
    assert first.key == "c1" and first.outcome == CREATED and first.effect_id == "ch_0001"
    assert first.attempt == 3 and first.pid == os.getpid() and first.time <= time.time()
    assert snap.state == {"status": {"done": False}}
    assert snap.in_flight == ()
    assert [c.op for c in fakes.ledger.calls("payments")] == ["charge", "refund"]
    assert [c.seq for c in fakes.ledger.calls("payments", "refund")] == [5]
    assert fakes.ledger.calls(op="send")[0].provider == "mailbox"
    # The snapshot survives a JSON round trip unchanged (reports store it).
    assert LedgerSnapshot.from_dict(snap.to_dict()) == snap


def test_in_flight_keys_are_in_the_snapshot(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "l.sqlite"), "t")
    with ledger.transaction() as tx:
        tx.claim_key("payments", "k9", "charge", {"amount": 1}, attempt=2)
    (flight,) = ledger.snapshot().in_flight
    assert (flight.provider, flight.op, flight.key, flight.attempt) == ("payments", "charge", "k9", 2)
    assert ledger.calls() == []


def test_canonical_json_is_order_insensitive() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == canonical_json(
        {"a": [1, {"c": 3, "d": 2}], "b": 1}
    )
    assert canonical_json({"a": (1, 2)}) == '{"a":[1,2]}'


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(LedgerError) as info:
        Ledger(str(path), "t")
    text = _one_line(info.value)
    assert str(path) in text and "not a database" in text


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE checkpoints (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(LedgerError) as info:
        Ledger(str(path), "t")
    text = _one_line(info.value)
    assert str(path) in text and "not a killdrill ledger" in text and "checkpoints" in text


def test_other_ledger_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE killdrill_meta (name TEXT PRIMARY KEY, value TEXT)")
    db.execute("INSERT INTO killdrill_meta VALUES ('format', 'killdrill-ledger/0')")
    db.commit()
    db.close()
    with pytest.raises(LedgerError) as info:
        Ledger(str(path), "t")
    assert LEDGER_FORMAT in _one_line(info.value) and str(path) in str(info.value)


def test_a_call_records_the_runtime_context_it_ran_under(tmp_path: Path) -> None:
    from killdrill.agent import in_runtime

    fakes = connect(tmp_path / "l.sqlite", thread="t")
    with in_runtime(runtime="temporal", unit="activity", name="charge", attempt=2):
        fakes.payments.charge(idempotency_key="k", amount=10)
    fakes.payments.charge(idempotency_key="k2", amount=10)
    calls = Ledger(tmp_path / "l.sqlite", "t").calls()
    assert calls[0].context == {"runtime": "temporal", "unit": "activity", "name": "charge", "attempt": 2}
    assert calls[1].context is None


def test_a_ledger_written_before_the_context_column_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    connect(path, thread="t").payments.charge(idempotency_key="k", amount=10)
    Ledger(path, "t").close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE killdrill_calls DROP COLUMN context")  # as killdrill wrote it before
    db.commit()
    db.close()
    from killdrill.ledger import _ledger

    _ledger._ready.clear()  # a new process opening it
    ledger = Ledger(path, "t")
    assert [c.key for c in ledger.calls()] == ["k"] and ledger.calls()[0].context is None
    connect(ledger).payments.charge(idempotency_key="k2", amount=10)
    assert len(ledger.calls()) == 2


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="directory"):
        Ledger(str(tmp_path), "t")


def _writer(url: str, thread: str, n: int, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()
    fakes = connect(url, thread=thread, attempt=1)
    for i in range(n):
        fakes.counter.increment("hits")
        fakes.kv.set(f"k{os.getpid()}", i)


def _race_writers(url: str, thread: str, procs: int = 4, n: int = 10) -> None:
    barrier = FORK.Barrier(procs)
    workers = [FORK.Process(target=_writer, args=(url, thread, n, barrier)) for _ in range(procs)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert [w.exitcode for w in workers] == [0] * procs
    ledger = Ledger(url, thread)
    calls = ledger.calls()
    assert [c.seq for c in calls] == list(range(1, 2 * procs * n + 1))
    assert len({c.pid for c in calls}) == procs
    assert connect(ledger).counter.get("hits") == procs * n
    assert sorted(c.payload["by"] for c in ledger.calls("counter")) == [1] * procs * n
    values = [c.effect_id for c in ledger.calls("counter")]
    assert len(set(values)) == procs * n  # every increment got its own effect id


def test_concurrent_writers_sqlite_including_schema_creation(tmp_path: Path) -> None:
    # The file does not exist yet: the four processes also race to create the schema.
    _race_writers(str(tmp_path / "fresh" / "l.sqlite"), "t", procs=8)


@pytest.mark.postgres
def test_concurrent_writers_postgres(postgres_url: str, unique_thread: str) -> None:
    _race_writers(postgres_url, unique_thread)


@pytest.mark.postgres
def test_postgres_threads_isolated_and_snapshot(postgres_url: str, unique_thread: str) -> None:
    a = connect(postgres_url, thread=unique_thread)
    b = connect(postgres_url, thread=unique_thread + "-b")
    a.payments.charge(idempotency_key="k", amount=10)
    a.payments.charge(idempotency_key="k", amount=10)
    b.payments.charge(idempotency_key="k", amount=11)
    a.kv.set("s", [1, 2])
    snap = a.ledger.snapshot()
    assert [c.outcome for c in snap.calls] == ["created", "replayed", "created"]
    assert snap.state == {"s": [1, 2]}
    assert [c.outcome for c in b.ledger.calls()] == ["created"]
    assert Ledger(postgres_url, unique_thread + "-empty").snapshot() == LedgerSnapshot()


def test_a_file_made_anew_at_the_same_path_is_read_afresh(tmp_path) -> None:
    """A reused workdir: the cached engine must not read the deleted file's pooled connection."""
    path = tmp_path / "ledger.sqlite"
    connect(str(path), thread="t").payments.charge(idempotency_key="k1", amount=1)
    assert len(Ledger(str(path), "t").snapshot().calls) == 1
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"ledger.sqlite{suffix}").unlink(missing_ok=True)
    connect(str(path), thread="t").payments.charge(idempotency_key="k2", amount=2)
    connect(str(path), thread="t").payments.charge(idempotency_key="k3", amount=3)
    assert [c.key for c in Ledger(str(path), "t").snapshot().calls] == ["k2", "k3"]


def _charge_and_die(path: str) -> None:
    connect(path, thread="t").payments.charge(idempotency_key="k1", amount=1)
    os._exit(0)  # as a SIGKILL leaves it: the WAL not copied into the file


def test_a_read_only_reader_leaves_a_killed_writers_wal_alone(tmp_path: Path) -> None:
    """The harness reads a case after each attempt through a connection that cannot write: its
    close copies no WAL into the file (a checkpoint with an fsync at every read would be a tenth of
    a 1,000-effect case's harness time)."""
    path, wal = tmp_path / "ledger.sqlite", tmp_path / "ledger.sqlite-wal"
    child = FORK.Process(target=_charge_and_die, args=(str(path),))
    child.start()
    child.join()
    size, wal_size = path.stat().st_size, wal.stat().st_size
    assert wal_size > 0
    reader = Ledger(str(path), "t", read_only=True)
    assert [c.key for c in reader.snapshot().calls] == ["k1"]
    reader.close()
    assert (path.stat().st_size, wal.stat().st_size) == (size, wal_size)
    writer = Ledger(str(path), "t")  # a writer's pool is its own: it can still write
    writer.configure("killdrill", mark="m")
    writer.close()
    assert not wal.exists()  # the last writer's close copied it in


def test_a_read_only_reader_of_a_file_that_is_no_ledger_says_so(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    sqlite3.connect(path).close()  # an empty database: the agent made the file anew
    with pytest.raises(LedgerError, match="holds no ledger tables"):
        Ledger(str(path), "t", read_only=True).snapshot()
    assert path.stat().st_size == 0  # and made nothing in it


def test_a_snapshot_since_an_earlier_one_parses_only_what_came_after(tmp_path: Path) -> None:
    """After attempt 2 a case reads only the calls after attempt 1's; a ledger whose
    earlier calls are gone or changed is read whole, so the check that follows sees it."""
    path = str(tmp_path / "ledger.sqlite")
    fakes = connect(path, thread="t")
    fakes.payments.charge(idempotency_key="k1", amount=1)
    first = Ledger(path, "t").snapshot()
    fakes.payments.charge(idempotency_key="k2", amount=2)
    since = Ledger(path, "t").snapshot(first)
    assert since == Ledger(path, "t").snapshot() and [c.key for c in since.calls] == ["k1", "k2"]
    assert since.calls[0] is first.calls[0]  # kept, not parsed again
    with sqlite3.connect(path) as db:  # the first call rewritten under another key
        db.execute("UPDATE killdrill_calls SET key = 'other' WHERE key = 'k1'")
    db.close()
    changed = Ledger(path, "t").snapshot(first)
    assert [c.key for c in changed.calls] == ["other", "k2"]
