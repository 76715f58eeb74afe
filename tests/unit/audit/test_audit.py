"""``killdrill audit``: the four queries on SQLite and PostgreSQL, read-only, and its parser (the
CLI's exit codes, on real processes, are in tests/acceptance/test_audit_cli.py)."""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from killdrill.audit import AuditError, add_parser, audit, main
from killdrill.effects import RacyResultStore, ResultStore, durable_effect, idempotency_key


def _clean_log(url: str) -> None:
    """A healthy log: stable keys, one success each, some replays."""
    with ResultStore(url) as s:
        for thread in ("t1", "t2"):
            key = idempotency_key(thread, "charge", 0, {"cycle": "2024-06"})
            for _ in range(3):  # first fresh, then two replays
                durable_effect(
                    s, key, lambda: {"id": "ch"}, provider_honours_keys=True, thread=thread, node="charge",
                    occurrence=0, payload={"cycle": "2024-06"},
                )  # fmt: skip


def test_clean_log(store_url: str) -> None:
    _clean_log(store_url)
    r = audit(store_url)
    assert r.ok and not r.duplicates and not r.multi_key and not r.stuck
    assert (r.stats.fresh, r.stats.replayed, r.stats.keys, r.stats.ratio) == (2, 4, 2, 2.0)


def test_duplicate_fresh_success_from_the_planted_race(store_url: str) -> None:
    # the racy store's window, entered by two callers: both claim, both perform, both complete
    with ResultStore(store_url):
        pass
    second = RacyResultStore(store_url, on_window=lambda: None)
    first = RacyResultStore(store_url, on_window=lambda: second.claim("mail", thread="t", node="receipt"))
    first.claim("mail", thread="t", node="receipt")
    first.complete("mail", {"id": "m1"})
    second.complete("mail", {"id": "m2"})
    first.close()
    second.close()
    r = audit(store_url)
    assert not r.ok
    assert [(d.key, d.successes, d.node) for d in r.duplicates] == [("mail", 2, "receipt")]


def test_operation_with_more_than_one_key(store_url: str) -> None:
    with ResultStore(store_url) as s:
        for attempt in range(2):  # a uuid key: every attempt a new one
            key = f"charge-{uuid.uuid4()}"
            s.claim(key, thread="t", node="charge", occurrence=0, payload={"amount": 100 + attempt})
            s.complete(key, {"id": key})
        for attempt in range(2):  # a clock key on another node, same payload
            key = f"mail-{attempt}"
            s.claim(key, thread="t", node="mail", occurrence=attempt, payload={"to": "x"})
            s.complete(key, {})
    r = audit(store_url)
    found = {(m.by, m.node, len(m.keys)) for m in r.multi_key}
    assert found == {("operation", "charge", 2), ("payload", "mail", 2)}
    assert not r.duplicates and not r.ok


def test_in_flight_longer_than_threshold(store_url: str) -> None:
    with ResultStore(store_url) as s:
        s.claim("old", thread="t", node="mail")
        s.claim("new", thread="t", node="mail")
        with s.engine.begin() as conn:
            conn.execute(
                s.states.update().where(s.states.c.key == "old").values(updated_at=time.time() - 3600)
            )
    r = audit(store_url, in_flight_threshold_s=600)
    assert [(st.key, st.node) for st in r.stuck] == [("old", "mail")]
    assert 3590 < r.stuck[0].age_s < 3700
    assert audit(store_url, in_flight_threshold_s=7200).ok


def test_audit_is_read_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.sqlite'}"
    _clean_log(url)
    before = (tmp_path / "e.sqlite").read_bytes()
    audit(url)
    assert (tmp_path / "e.sqlite").read_bytes() == before
    with pytest.raises(AuditError):
        audit(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()  # never created by looking


def test_not_an_effect_log(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    eng = sa.create_engine(f"sqlite:///{other}")
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x int)")
    eng.dispose()
    assert main([str(other)]) == 2


def test_add_parser_wires_a_handler(tmp_path: Path) -> None:
    db = tmp_path / "e.sqlite"
    _clean_log(str(db))
    parser = argparse.ArgumentParser(prog="killdrill")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["audit", str(db), "--in-flight-threshold", "10"])
    assert args.func(args) == 0 and args.in_flight_threshold == 10.0
