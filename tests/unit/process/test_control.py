"""The control channel, supervisor side, in one process: the hello, boundaries, answers, limits.

The listener is driven by hand (no supervisor): the test is the agent, connected over the real
Unix socket, so every rule of the module (token, one request at a time, bounded lines, point
names, connection limit, cleanup) is checked on the bytes that cross it.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from killdrill.process.control import (
    MAX_LINE,
    BoundaryMessage,
    Connection,
    ControlListener,
    ProtocolViolation,
    in_process_tree,
    parent_pid,
    peer_credentials,
)

_clients: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """The test's client sockets are closed after it (no ResourceWarning from a test)."""
    yield
    while _clients:
        _clients.pop().close()


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[ControlListener]:
    selector = selectors.DefaultSelector()
    lst = ControlListener(str(tmp_path / "ctl"), selector).open()
    yield lst
    lst.close()
    selector.close()


def _connect(lst: ControlListener) -> tuple[socket.socket, Connection]:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _clients.append(client)
    client.connect(lst.address if not lst.address.startswith("@") else "\0" + lst.address[1:])
    client.settimeout(5)
    conn = _accept(lst)
    assert conn is not None
    return client, conn


def _accept(lst: ControlListener) -> Connection | None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        conn = lst.accept()
        if conn is not None or lst.ignored:
            return conn
        time.sleep(0.005)
    return None


def _send(client: socket.socket, lst: ControlListener, conn: Connection, *lines: object) -> list[object]:
    """Send ``lines`` (dicts as JSON, bytes raw) in one write and return what the listener made of them."""
    data = b"".join(x if isinstance(x, bytes) else json.dumps(x).encode() + b"\n" for x in lines)
    client.sendall(data)
    out: list[object] = []
    wait = 5.0  # for the first bytes; then only while more keep coming
    while id(conn) in lst.connections and select.select([conn.sock], [], [], wait)[0]:
        out += list(lst.read(conn))
        wait = 0.05
    return out


def _hello(client: socket.socket, lst: ControlListener, conn: Connection) -> None:
    assert _send(client, lst, conn, {"token": lst.token, "thread": "t-1"}) == []
    assert conn.hello and conn.thread == "t-1"


def _answer(client: socket.socket) -> dict[str, object]:
    line = b""
    while not line.endswith(b"\n"):
        chunk = client.recv(4096)
        if not chunk:
            break
        line += chunk
    return json.loads(line) if line else {}


def test_socket_is_private_and_its_name_does_not_hold_the_token(listener: ControlListener) -> None:
    assert os.stat(os.path.dirname(listener.address)).st_mode & 0o777 == 0o700
    assert listener.token not in listener.address
    assert len(listener.token) == 32


def test_a_boundary_after_the_hello_is_held_until_released(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    msgs = _send(client, listener, conn, {"point": "before:charge"})
    assert msgs == [BoundaryMessage(conn, "before:charge")]
    assert conn.waiting == "before:charge"
    client.settimeout(0.2)
    with pytest.raises(socket.timeout):
        client.recv(1)  # held: no answer until the supervisor decides
    client.settimeout(5)
    listener.release(conn)
    assert _answer(client) == {"go": True}
    assert conn.waiting is None
    # the next boundary is fine once the previous one was answered
    assert _send(client, listener, conn, {"point": "during:payments.charge"}) == [
        BoundaryMessage(conn, "during:payments.charge")
    ]


def test_a_peer_without_the_token_is_ignored_not_fatal(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    out = _send(client, listener, conn, {"token": "0" * 32})
    assert out == []  # not the case's failure: it may be anyone of our uid
    assert "without the attempt's token" in _answer(client)["error"]  # type: ignore[operator]
    assert id(conn) not in listener.connections
    assert listener.ignored == 1
    note = listener.stranger_note()
    assert note is not None and note.startswith("ignored 1 control connection(s)")


def test_a_boundary_before_the_hello_is_refused(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    assert _send(client, listener, conn, {"point": "before:charge"}) == []
    assert not conn.hello and listener.ignored == 1


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json\n", "malformed control message"),
        (b"[1, 2]\n", "malformed control message"),
        (b"[" * (3 * MAX_LINE) + b"\n", "longer than"),
        (json.dumps({"point": "charge"}).encode() + b"\n", "invalid boundary name"),
        (json.dumps({"point": "before:x; rm -rf /"}).encode() + b"\n", "invalid boundary name"),
        (json.dumps({"point": 7}).encode() + b"\n", "invalid boundary name"),
    ],
)
def test_junk_after_the_hello_is_the_agents_protocol_error(
    listener: ControlListener, line: bytes, why: str
) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    out = _send(client, listener, conn, line)
    assert len(out) == 1 and isinstance(out[0], ProtocolViolation), out
    assert out[0].fatal and why in out[0].message
    assert id(conn) not in listener.connections  # hung up
    assert listener.ignored == 0


def test_nested_json_under_the_line_limit_is_malformed_not_a_traceback(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    line = b"[" * (MAX_LINE - 10) + b"\n"
    out = _send(client, listener, conn, line)
    assert len(out) == 1 and isinstance(out[0], ProtocolViolation) and out[0].fatal


def test_two_boundaries_without_waiting_for_the_answer_are_pipelining(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    out = _send(client, listener, conn, {"point": "before:a"}, {"point": "before:b"})
    assert out[0] == BoundaryMessage(conn, "before:a")
    assert isinstance(out[1], ProtocolViolation) and out[1].fatal
    assert "before the answer to the previous one" in out[1].message


def test_a_boundary_while_one_is_held_is_pipelining(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    assert _send(client, listener, conn, {"point": "before:a"}) == [BoundaryMessage(conn, "before:a")]
    out = _send(client, listener, conn, {"point": "before:b"})
    assert len(out) == 1 and isinstance(out[0], ProtocolViolation) and out[0].fatal


def test_one_way_boundaries_are_not_requests_and_owe_no_answer(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    one_way = [{"point": "during:payments.charge", "wait": False, "at": 1.5 + i} for i in range(3)]
    out = _send(client, listener, conn, *one_way, {"point": "before:a"})
    assert out == [
        *(BoundaryMessage(conn, "during:payments.charge", waits=False, at=1.5 + i) for i in range(3)),
        BoundaryMessage(conn, "before:a"),
    ]
    assert conn.waiting == "before:a"  # the waiting one is held as before
    client.settimeout(0.2)
    with pytest.raises(socket.timeout):
        client.recv(1)  # and nothing was sent for the one-way ones
    listener.release(conn)
    client.settimeout(5)
    assert _answer(client) == {"go": True}


def test_a_line_after_a_waiting_boundary_in_one_write_is_still_pipelining(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    out = _send(client, listener, conn, {"point": "before:a"}, {"point": "after:a", "wait": False, "at": 2.0})
    assert out[0] == BoundaryMessage(conn, "before:a")
    assert isinstance(out[1], ProtocolViolation) and "before the answer" in out[1].message


def test_a_one_way_time_that_is_not_a_number_is_dropped_not_trusted(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    _hello(client, listener, conn)
    out = _send(client, listener, conn, {"point": "after:a", "wait": False, "at": "soon"})
    assert out == [BoundaryMessage(conn, "after:a", waits=False, at=None)]


def test_drain_reads_what_exited_peers_left_one_way_and_nothing_they_waited_for(
    listener: ControlListener,
) -> None:
    first, c1 = _connect(listener)
    second, c2 = _connect(listener)
    _hello(first, listener, c1)
    _hello(second, listener, c2)
    many = b"".join(
        json.dumps({"point": "during:payments.charge", "wait": False, "at": float(i)}).encode() + b"\n"
        for i in range(500)  # more than one read's worth
    )
    first.sendall(many)
    first.close()  # the process exited: its bytes are still there
    second.sendall(json.dumps({"point": "after:b", "wait": False, "at": 9.0}).encode() + b"\n")
    second.sendall(json.dumps({"point": "before:c"}).encode() + b"\n")  # sent, never answered
    drained = list(listener.drain())
    assert [m.at for m in drained if m.conn is c1] == [float(i) for i in range(500)]
    assert [(m.point, m.waits) for m in drained if m.conn is c2] == [("after:b", False)]
    assert id(c1) not in listener.connections  # EOF seen: closed


def test_connections_past_the_limit_are_closed_unheard(tmp_path: Path) -> None:
    selector = selectors.DefaultSelector()
    lst = ControlListener(str(tmp_path / "ctl"), selector, max_connections=2).open()
    try:
        clients = [_connect(lst)[0] for _ in range(2)]
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.connect(lst.address)
        assert _accept(lst) is None
        assert len(lst.connections) == 2 and lst.ignored == 1
        assert "past the limit of 2" in (lst.stranger_note() or "")
        extra.settimeout(5)
        assert extra.recv(1) == b""  # closed without a word
        for c in [*clients, extra]:
            c.close()
    finally:
        lst.close()
        selector.close()


def test_eof_closes_the_connection(listener: ControlListener) -> None:
    client, conn = _connect(listener)
    client.close()
    deadline = time.monotonic() + 5
    while id(conn) in listener.connections and time.monotonic() < deadline:
        assert list(listener.read(conn)) == []
    assert listener.connections == {}


def test_a_long_directory_falls_back_to_a_short_private_one(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    selector = selectors.DefaultSelector()
    lst = ControlListener(str(deep), selector).open()
    try:
        assert len(lst.address.encode()) <= 100
        if not lst.address.startswith("@"):
            short = os.path.dirname(lst.address)
            assert os.stat(short).st_mode & 0o777 == 0o700
        client, conn = _connect(lst)
        _hello(client, lst, conn)
        client.close()
    finally:
        lst.close()
        selector.close()
    if not lst.address.startswith("@"):
        assert not os.path.exists(lst.address) and not os.path.exists(os.path.dirname(lst.address))


def test_close_removes_the_socket_file(tmp_path: Path) -> None:
    selector = selectors.DefaultSelector()
    lst = ControlListener(str(tmp_path / "ctl"), selector).open()
    address = lst.address
    assert os.path.exists(address)
    lst.close()
    selector.close()
    assert not os.path.exists(address)


def test_attach_limits_the_channel_to_the_attempts_process_tree(listener: ControlListener) -> None:
    """A process of our uid that is not under the attempt's root (nor the harness) is a stranger."""
    code = (
        "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        "print(s.recv(1) == b'', flush=True)"
    )
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    listener.attach(root.pid)  # the attempt: the outsider below is its sibling, not its child
    outsider = subprocess.Popen(
        [sys.executable, "-c", code, listener.address], stdout=subprocess.PIPE, text=True
    )
    try:
        conn = _accept(listener)
        assert conn is None and listener.ignored == 1
        assert f"pid {outsider.pid}" in (listener.stranger_note() or "")
        assert outsider.communicate(timeout=10)[0].strip() == "True"  # closed at once
    finally:
        for proc in (outsider, root):
            proc.kill()
            proc.wait()
    # the harness itself (its HTTP fakes announce during:) is always heard
    client, conn2 = _connect(listener)
    assert conn2.peer_pid == os.getpid()
    client.close()


def test_peer_credentials_and_the_process_tree() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        creds = peer_credentials(a)
    finally:
        a.close()
        b.close()
    if sys.platform.startswith("linux"):
        assert creds == (os.getpid(), os.geteuid())
        assert parent_pid(os.getpid()) == os.getppid()
        assert in_process_tree(os.getpid(), os.getppid())
        assert in_process_tree(os.getpid(), os.getpid())
        assert not in_process_tree(os.getppid(), os.getpid())
    assert parent_pid(2**22 + 12345) is None  # no such process
    assert not in_process_tree(2**22 + 12345, os.getpid())
