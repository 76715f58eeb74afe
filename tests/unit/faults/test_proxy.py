"""The fault proxy against a real PostgreSQL through psycopg: the answer to COMMIT lost after the
server committed (the row is there, the client got a connection error), a reset before COMMIT is
sent (the row is not there), the ``during:`` announcement a supervisor can kill at, and the
whole-connection faults (cut, reset, hold)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from killdrill.faults.proxy import Armed, FaultProxy

psycopg = pytest.importorskip("psycopg")


def _libpq(url: str) -> dict[str, Any]:
    """psycopg's connection arguments for the test's SQLAlchemy URL (its private schema kept)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    options = u.query.get("options")
    args: dict[str, Any] = {"user": u.username or "postgres", "dbname": u.database}
    if options:
        args["options"] = options if isinstance(options, str) else options[0]
    return args


@pytest.fixture
def pg(postgres_url: str) -> Iterator[dict[str, Any]]:
    """Connection arguments of the test's schema, with a table ``receipts(order_id)``."""
    args = _libpq(postgres_url)
    with psycopg.connect(host="127.0.0.1", port=5432, **args, autocommit=True) as conn:
        conn.execute("CREATE TABLE receipts (order_id text)")
    yield args


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy("postgres", "postgres", ("127.0.0.1", 5432)) as p:
        yield p


def _rows(pg: dict[str, Any]) -> int:
    with psycopg.connect(host="127.0.0.1", port=5432, **pg) as conn:
        row = conn.execute("SELECT count(*) FROM receipts").fetchone()
        assert row is not None
        return int(row[0])


def _insert_and_commit(pg: dict[str, Any], port: int) -> None:
    with psycopg.connect(host="127.0.0.1", port=port, **pg, connect_timeout=5) as conn:
        conn.execute("INSERT INTO receipts VALUES (%s)", ("o-1",))
        conn.commit()


def test_a_clean_session_passes_through(pg: dict[str, Any], proxy: FaultProxy) -> None:
    _insert_and_commit(pg, proxy.listen("a1"))
    assert _rows(pg) == 1


def test_a_dropped_commit_answer_leaves_the_row_committed_and_the_client_an_error(
    pg: dict[str, Any], proxy: FaultProxy
) -> None:
    notes: list[str] = []
    proxy.arm("a1", Armed("drop", "commit", applied=notes.append))
    with pytest.raises(psycopg.OperationalError):
        _insert_and_commit(pg, proxy.listen("a1"))
    assert _rows(pg) == 1  # the server committed: only the answer was lost
    assert notes and "dropped the answer of postgres.commit" in notes[0]


def test_a_reset_before_commit_is_sent_commits_nothing(pg: dict[str, Any], proxy: FaultProxy) -> None:
    notes: list[str] = []
    proxy.arm("a1", Armed("reset", "commit", applied=notes.append))
    with pytest.raises(psycopg.OperationalError):
        _insert_and_commit(pg, proxy.listen("a1"))
    time.sleep(0.2)  # the server ends the session it lost and rolls its transaction back
    assert _rows(pg) == 0
    assert "reset the connection of postgres.commit" in notes[0]


def test_the_second_commit_is_the_one_dropped(pg: dict[str, Any], proxy: FaultProxy) -> None:
    proxy.arm("a1", Armed("drop", "commit", occurrence=2))
    port = proxy.listen("a1")
    _insert_and_commit(pg, port)
    with pytest.raises(psycopg.OperationalError):
        _insert_and_commit(pg, port)
    _insert_and_commit(pg, port)
    assert _rows(pg) == 3


def test_a_fault_armed_for_one_launch_spares_another(pg: dict[str, Any], proxy: FaultProxy) -> None:
    proxy.arm("a1", Armed("drop", "commit"))
    _insert_and_commit(pg, proxy.listen("a2"))
    assert _rows(pg) == 1


class _Channel:
    """A stand-in supervisor's control channel: records the points, answers go or hangs up."""

    def __init__(self, path: str, hang_up_at: str | None = None) -> None:
        self.points: list[str] = []
        self.hang_up_at = hang_up_at
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        self.path = path
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as reader:
                hello = json.loads(reader.readline())
                assert hello["token"] == "tok"
                for line in reader:
                    point = json.loads(line)["point"]
                    self.points.append(point)
                    if point == self.hang_up_at:
                        break  # the supervisor killed the caller: the channel closes unanswered
                    conn.sendall(b'{"go": true}\n')


def test_a_commit_answer_is_announced_and_held_while_the_supervisor_decides(
    pg: dict[str, Any], proxy: FaultProxy, tmp_path: Any
) -> None:
    channel = _Channel(str(tmp_path / "ctl"))
    proxy.bind("a1", channel.path, "tok")
    _insert_and_commit(pg, proxy.listen("a1"))
    assert channel.points == ["during:postgres.commit"]


def test_a_kill_at_the_announced_commit_closes_the_connection_unanswered(
    pg: dict[str, Any], proxy: FaultProxy, tmp_path: Any
) -> None:
    channel = _Channel(str(tmp_path / "ctl"), hang_up_at="during:postgres.commit")
    proxy.bind("a1", channel.path, "tok")
    with pytest.raises(psycopg.OperationalError):
        _insert_and_commit(pg, proxy.listen("a1"))
    assert _rows(pg) == 1


def test_a_rolled_back_commit_is_not_announced(pg: dict[str, Any], proxy: FaultProxy, tmp_path: Any) -> None:
    channel = _Channel(str(tmp_path / "ctl"))
    proxy.bind("a1", channel.path, "tok")
    with psycopg.connect(host="127.0.0.1", port=proxy.listen("a1"), **pg) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("INSERT INTO nowhere VALUES (1)")
        conn.commit()  # the server answers ROLLBACK: nothing was committed
    assert channel.points == []


def test_cut_and_reset_end_every_open_connection(pg: dict[str, Any], proxy: FaultProxy) -> None:
    port = proxy.listen("a1")
    for fault in (proxy.cut, proxy.reset):
        with psycopg.connect(host="127.0.0.1", port=port, **pg) as conn:
            conn.execute("SELECT 1")
            deadline = time.monotonic() + 5
            while fault() == 0 and time.monotonic() < deadline:  # its link may still be starting
                time.sleep(0.01)
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")


def test_hold_stops_forwarding_for_its_time(pg: dict[str, Any], proxy: FaultProxy) -> None:
    with psycopg.connect(host="127.0.0.1", port=proxy.listen("a1"), **pg) as conn:
        conn.execute("SELECT 1")
        proxy.hold(0.5)
        started = time.monotonic()
        conn.execute("SELECT 1")
        assert time.monotonic() - started >= 0.45


def test_tls_is_declined_so_the_session_stays_readable(pg: dict[str, Any], proxy: FaultProxy) -> None:
    with psycopg.connect(host="127.0.0.1", port=proxy.listen("a1"), sslmode="prefer", **pg) as conn:
        assert conn.pgconn.ssl_in_use is False


def test_redis_commands_are_framed_and_exec_is_announced(tmp_path: Any) -> None:
    redis = pytest.importorskip("redis")
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    key = f"kd-proxy-test-{os.getpid()}"
    with FaultProxy("redis", "redis", ("127.0.0.1", 6379)) as proxy:
        channel = _Channel(str(tmp_path / "ctl"))
        proxy.bind("a1", channel.path, "tok")
        proxy.arm("a1", Armed("drop", "exec"))
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # no retry: redis-py's default one sends the whole MULTI/EXEC again (applied twice)
        client = redis.Redis(host="127.0.0.1", port=proxy.listen("a1"), retry=Retry(NoBackoff(), 0))
        try:
            client.set(key, "1")
            with pytest.raises(redis.ConnectionError), client.pipeline(transaction=True) as pipe:
                pipe.incr(key).incr(key).execute()
            direct = redis.Redis(host="127.0.0.1", port=6379)
            assert direct.get(key) == b"3"  # the transaction was applied, its answer lost
            direct.delete(key)
        finally:
            client.close()
    assert channel.points == ["during:redis.exec"]
