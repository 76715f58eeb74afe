"""A connection to PostgreSQL cut under COMMIT, drilled for real through ``--proxy``: a psycopg
agent that books a payout row and retries the step on a connection error
(``tests/agents/db/pg_retry.py``), its row read back as an effect (``--effect-table``).

- ``drop:pg.commit``: the server commits, the answer is lost, the connection closes.  The agent
  that retries blindly books the payout twice (a duplicate, both rows by attempt 1); the one that
  checks first finds its row.
- ``during:pg.commit``: the agent is killed there (committed, not heard).  The blind one books it
  again when resumed; the one that checks first does not.
- ``reset:pg.commit``: the connection is reset before COMMIT is sent: nothing committed, the
  retry books it once, for both.
- ``cut=pg:during:pg.commit``: every connection of the proxy closed at that point: as a drop.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions
from killdrill.errors import UsageError

AGENT = Path(__file__).parent.parent / "agents" / "db" / "pg_retry.py"


def drill(tmp_path: Path, server_url: str, retry: str) -> Drill:
    options = DrillOptions(
        root=tmp_path / "w",
        proxy={"pg": "postgres://127.0.0.1:5432"},
        effect_table={"payouts": (("order_id",), None)},
        effect_db=server_url,
        env={"DATABASE_URL": "postgresql://postgres@127.0.0.1:{proxy:pg}/test"},
    )
    return Drill(["python", str(AGENT), "--order", "{thread}", "--retry", retry], options)


def test_a_blind_retry_after_a_lost_commit_answer_books_twice(
    tmp_path: Path, postgres_server_url: str
) -> None:
    with drill(tmp_path, postgres_server_url, "blind") as d:
        assert [e.label for e in d.discover().catalogue] == ["during:pg.commit"]
        dropped = d.run_case("drop:pg.commit")
        killed = d.run_case("during:pg.commit")
        reset = d.run_case("reset:pg.commit")
        cut = d.run_case("cut=pg:during:pg.commit")  # every connection of the proxy, at the point
    assert dropped.kinds == ("duplicate_effect",), dropped.text()
    (v,) = dropped.violations
    assert (v.provider, v.op, v.identity) == ("db:payouts", "insert", {"order_id": "{thread}"})
    assert [c.attempt for c in v.calls] == [1, 1]  # the retry inside the attempt that lost the answer
    assert v.cause == "row_not_unique"
    assert "attempt 1 inserted the row again on a retry after drop:pg.commit" in v.observed, v.observed
    assert "dropped the answer of pg.commit" in dropped.attempts[0].notes[0]
    assert killed.kinds == ("duplicate_effect",), killed.text()
    assert [c.attempt for c in killed.violations[0].calls] == [1, 2]
    assert reset.ok, reset.text()  # nothing was committed: the retry's row is the only one
    assert cut.kinds == ("duplicate_effect",), cut.text()
    closed = cut.attempts[0].notes[0]
    assert re.search(r"\d+ connections? through proxy pg closed at during:pg.commit", closed), closed
    assert "--proxy pg=postgres://127.0.0.1:5432" in dropped.reproduce


def test_checking_before_the_retry_books_once(tmp_path: Path, postgres_server_url: str) -> None:
    with drill(tmp_path, postgres_server_url, "check") as d:
        for schedule in ("drop:pg.commit", "during:pg.commit"):
            case = d.run_case(schedule)
            assert case.ok, case.text()
            assert case.summary["db:payouts"]["exactly_once"] == 1
        stalled = d.run_case("stall=pg~1s:during:pg.commit")  # the answer late, not lost
    assert stalled.ok, stalled.text()
    assert "proxy pg forwarded nothing for 1s from during:pg.commit" in stalled.attempts[0].notes[0]
    assert stalled.attempts[0].duration_ms >= 1000


def test_a_proxy_placeholder_naming_no_proxy_is_one_line(tmp_path: Path) -> None:
    options = DrillOptions(root=tmp_path / "w", env={"DATABASE_URL": "postgresql://u@127.0.0.1:{proxy:db}/x"})
    with pytest.raises(UsageError, match=r"\{proxy:db\}: no --proxy named 'db' \(proxies: none\)"):
        Drill(["python", str(AGENT), "--order", "x", "--retry", "check"], options)
