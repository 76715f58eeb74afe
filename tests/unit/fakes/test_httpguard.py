"""The guard in front of every HTTP fake route: the drill's secret, bounded input, deadlines, a quiet
stop.  Real sockets and threads, in one process; charges forged by another user during a real
drill: tests/acceptance/test_http_forgery.py."""

from __future__ import annotations

import json
import os
import resource
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from killdrill.fakes import httpguard
from killdrill.fakes.http import FakesServer
from killdrill.ledger import Ledger


def _address(srv: FakesServer) -> tuple[str, int]:
    assert srv.url is not None
    return "127.0.0.1", urlsplit(srv.url).port or 0


def _secret_path(srv: FakesServer) -> str:
    assert srv.url is not None
    return urlsplit(srv.url).path


def raw(srv: FakesServer, data: bytes, timeout: float = 5) -> bytes:
    """Send ``data`` on a fresh connection; return the answer's first bytes (b"" when closed)."""
    with socket.create_connection(_address(srv), timeout=timeout) as s:
        try:
            s.sendall(data)
            return s.recv(4096)
        except ConnectionResetError:
            return b""


def status_of(answer: bytes) -> int | None:
    return int(answer.split()[1]) if answer.startswith(b"HTTP/1.") else None


def post(path: str, body: bytes, headers: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    return head.encode() + body


def test_a_request_without_the_secret_is_refused_and_records_nothing(
    server: FakesServer, ledger_file: str
) -> None:
    body = json.dumps({"key": "a", "value": 1}).encode()
    assert status_of(raw(server, post("/fakes/kv/set", body))) == 404
    assert status_of(raw(server, post("/wrong-secret/fakes/kv/set", body))) == 404
    assert Ledger(ledger_file, "t").calls() == []
    # the base URL's path carries it; a header works for clients that cannot change the path
    assert status_of(raw(server, post(_secret_path(server) + "/fakes/kv/set", body))) == 200
    secret = _secret_path(server).strip("/")
    assert status_of(raw(server, post("/fakes/kv/set", body, f"X-Killdrill-Secret: {secret}\r\n"))) == 200
    assert len(Ledger(ledger_file, "t").calls()) == 2


def test_a_new_route_inherits_the_guard(server: FakesServer) -> None:
    """Routes added by other modules (webhooks, a model) get the secret check and the bounds."""

    @httpguard.route("POST", r"/test/echo")
    def echo(handler: httpguard.GuardedHandler, request: httpguard.Request) -> None:
        handler.send_json(200, {"n": len(request.body)})

    try:
        assert status_of(raw(server, post("/test/echo", b"hi"))) == 404
        assert status_of(raw(server, post(_secret_path(server) + "/test/echo", b"hi"))) == 200
        big = post(_secret_path(server) + "/test/echo", b"", f"X-Pad: {'x' * 10}\r\n")
        big = big.replace(b"Content-Length: 0", f"Content-Length: {httpguard.MAX_BODY + 1}".encode())
        assert status_of(raw(server, big)) == 413
        get = f"GET {_secret_path(server)}/test/echo HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        assert status_of(raw(server, get)) == 405
    finally:
        httpguard.ROUTES[:] = [r for r in httpguard.ROUTES if r[2].__name__ != "echo"]


class RssPeak:
    """The highest resident set size of this process while the block runs, sampled every 5 ms.

    Not ``ru_maxrss``: that is the lifetime peak, so after any earlier test that used more
    memory, a request that grows the process by a gigabyte would not show at all.
    """

    def __init__(self) -> None:
        self.before = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def grown_mb(self) -> float:
        return (self.peak - self.before) / (1 << 20)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="samples /proc/self/statm (Linux)")
def test_a_huge_body_is_413_before_it_is_read(server: FakesServer) -> None:
    """A 1 GiB body is answered 413 after its headers, never read whole (that would be 2 GB RSS)."""
    with RssPeak() as rss:
        answer, sent = _send_huge_body(server, 1 << 30)
    assert status_of(answer) == 413, answer
    assert sent < 64 << 20, f"the server let {sent >> 20} MiB in"
    assert rss.grown_mb < 64, f"RSS grew {rss.grown_mb:.0f} MB during the request"


def _send_huge_body(server: FakesServer, size: int) -> tuple[bytes, int]:
    with socket.create_connection(_address(server), timeout=10) as s:
        s.sendall(
            f"POST {_secret_path(server)}/fakes/kv/set HTTP/1.1\r\nContent-Length: {size}\r\n\r\n".encode()
        )
        sent = 0
        chunk = b"x" * (1 << 20)
        try:
            while sent < size:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the server closed the connection: it does not read the rest
        answer = s.recv(4096)
    return answer, sent


def test_a_drip_feeding_client_is_closed_at_the_deadline(
    server: FakesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(httpguard, "REQUEST_DEADLINE_S", 1.0)
    with socket.create_connection(_address(server), timeout=10) as s:
        s.sendall(f"POST {_secret_path(server)}/fakes/kv/set HTTP/1.1\r\n".encode())
        started = time.monotonic()
        closed = b"?"
        while time.monotonic() - started < 15:
            s.sendall(b"X-Drip: 1\r\n")  # a header line every 0.3 s: each read is quick, the whole is not
            time.sleep(0.3)
            s.settimeout(0.01)
            try:
                closed = s.recv(100)
            except TimeoutError:
                continue
            except OSError:
                closed = b""
            break
        elapsed = time.monotonic() - started
    assert closed == b"" and elapsed < 8, (closed, elapsed)  # 1 s deadline, generous under load


def test_stop_leaves_no_thread(ledger_file: str) -> None:
    """Slow, idle and half-sent connections are all closed by stop(), and every handler thread ends."""
    baseline = threading.active_count()
    srv = FakesServer(ledger_file)
    srv.start()
    held = []
    for i in range(40):
        s = socket.create_connection(_address(srv), timeout=5)
        s.sendall(
            b"POST "
            + _secret_path(srv).encode()
            + (b"/fakes/kv/set HTTP/1.1\r\nContent-Length: 9\r\n\r\n{" if i % 2 else b"")
        )
        held.append(s)
    deadline = time.monotonic() + 20  # the server accepts at its own pace on a loaded machine
    while threading.active_count() < baseline + 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() >= baseline + 40
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 5
    assert threading.active_count() == baseline, [t.name for t in threading.enumerate()]
    for s in held:
        s.close()


JUNK = [
    b"GARBAGE\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" * 10 + b"\r\n\r\n",  # a TLS hello
    b"POST /x HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\n" + b"X-H: 1\r\n" * 200 + b"\r\n",
]


def _refusal(answer: bytes) -> str | None:
    """What is wrong with ``answer`` as the refusal of a malformed request (None: a proper one).

    A 4xx status line; or, for a request line that is not HTTP/1.x at all (answered the
    HTTP/0.9 way, a body without a status line), the JSON error body.  Silence is not a refusal:
    a server that hangs up on everything (or died) must fail this test.
    """
    status = status_of(answer)
    if status is not None:
        return None if 400 <= status < 500 else f"status {status}"
    if not answer:
        return "no answer at all"
    try:
        error = json.loads(answer)["error"]
    except (ValueError, KeyError, TypeError):
        return f"neither a status line nor a JSON error: {answer[:80]!r}"
    return None if error.get("type") == "invalid_request_error" else f"error {error!r}"


def test_malformed_requests_get_a_4xx_quietly(
    server: FakesServer, ledger_file: str, capfd: pytest.CaptureFixture[str]
) -> None:
    p = _secret_path(server)
    authed = [
        post(p + "/fakes/kv/set", b"[" * 5000),
        post(p + "/fakes/kv/set", b"\xff\xfe{"),
        post(p + "/fakes/kv/set", b'{"key": "a", "value": 1, "surprise": 2}'),
        post(p + "/fakes/nope/set", b"{}"),
        post(p + "/v1/payment_intents", b"amount=1&metadata=x&metadata[a]=y"),
        post(p + "/v1/payment_intents", b"\xff\xfe"),
        post(p + "/fakes/kv/set", b"{}", "Idempotency-Key: " + "k" * 300 + "\r\n"),
        post(p + "/fakes/kv/set", b"{}", "Transfer-Encoding: chunked\r\n"),
        post(p + "/fakes/kv/set", b"{}").replace(b"Content-Length: 2", b"Content-Length: -2"),
        f"GET {p}/v1/payment_intents/{'a' * 300} HTTP/1.1\r\n\r\n".encode(),
    ]
    for data in JUNK + authed:
        for _ in range(3):
            answer = raw(server, data)
            assert _refusal(answer) is None, (data[:60], _refusal(answer))
    assert Ledger(ledger_file, "t").calls() == []  # nothing of it was recorded
    assert status_of(raw(server, post(p + "/fakes/kv/set", b'{"key": "a", "value": 1}'))) == 200
    assert "Traceback" not in capfd.readouterr().err


HOLDER = """
import socket, sys, time
held = []
for _ in range(int(sys.argv[3])):
    try:
        held.append(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5))
    except OSError:
        pass
print(len(held), flush=True)
time.sleep(30)
"""


def test_another_user_cannot_use_up_the_connections(server: FakesServer) -> None:
    """Another local user (no secret) holding more than every place: the drill's own request is
    still served, not answered 503."""
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a client as another user")
    host, port = _address(server)
    holder = subprocess.Popen(
        [
            *("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", HOLDER),
            *(host, str(port), str(httpguard.MAX_CONNECTIONS + 8)),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        assert held >= httpguard.MAX_CONNECTIONS, held  # the places were all taken
        body = json.dumps({"key": "a", "value": 1}).encode()
        assert status_of(raw(server, post(_secret_path(server) + "/fakes/kv/set", body))) == 200
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
