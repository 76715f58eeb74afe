"""The HTTP fakes: routes, Stripe headers and errors, in-flight 409, faults, the during: hold."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from killdrill.fakes.http import FakesServer, decode_form
from killdrill.ledger import Ledger
from killdrill.records import CONFLICT, CREATED, FAILED, REPLAYED


def request(
    srv: FakesServer, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One request on a fresh connection, under the server's base URL: (status, headers, JSON body)."""
    assert srv.url is not None
    base = urlsplit(srv.url)
    path = base.path + path
    conn = http.client.HTTPConnection(base.netloc, timeout=10)
    data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
    try:
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def calls(ledger_file: str, thread: str = "t") -> list[tuple[str, str, str]]:
    return [(c.provider, c.op, c.outcome) for c in Ledger(ledger_file, thread).calls()]


def test_listens_on_loopback_only(server: FakesServer) -> None:
    assert server.url is not None and server.url.startswith("http://127.0.0.1:")
    assert server._server is not None and server._server.server_address[0] == "127.0.0.1"


def test_generic_route_replays_a_keyed_charge(server: FakesServer, ledger_file: str) -> None:
    s1, h1, b1 = request(server, "POST", "/fakes/payments/charge", {"amount": 5}, {"Idempotency-Key": "k"})
    s2, h2, b2 = request(server, "POST", "/fakes/payments/charge", {"amount": 5}, {"Idempotency-Key": "k"})
    assert (s1, s2) == (200, 200)
    assert b1["id"] == b2["id"] == "ch_0001" and (b1["replayed"], b2["replayed"]) == (False, True)
    assert (h1["Idempotent-Replayed"], h2["Idempotent-Replayed"]) == ("false", "true")
    assert h1["Idempotency-Key"] == "k" and h1["Request-Id"].startswith("req_")
    assert h2["X-Killdrill-Outcome"] == REPLAYED
    assert calls(ledger_file) == [("payments", "charge", CREATED), ("payments", "charge", REPLAYED)]


def test_generic_routes_cover_every_fake(server: FakesServer, ledger_file: str) -> None:
    assert (
        request(server, "POST", "/fakes/mailbox/send", {"to": "a", "subject": "s", "body": "b", "ref": "r"})[
            0
        ]
        == 200
    )
    assert request(server, "POST", "/fakes/mailbox/lookup", {"ref": "r"})[2]["result"]["deliveries"] == 1
    assert request(server, "POST", "/fakes/kv/set", {"key": "a", "value": [1]})[0] == 200
    assert request(server, "POST", "/fakes/kv/get", {"key": "a"})[2] == {"result": [1]}
    assert request(server, "POST", "/fakes/counter/increment", {"name": "n", "by": 3})[2]["value"] == 3
    assert request(server, "POST", "/fakes/tickets/create", {"title": "x"})[2]["id"] == "tkt_0001"
    assert request(server, "POST", "/fakes/webhooks/post", {"event": "e"})[2]["delivered"] is True
    res = request(server, "POST", "/fakes/inventory/reserve", {"sku": "s", "qty": 1, "ref": "o"})[2]
    assert request(server, "POST", "/fakes/inventory/release", {"reservation_id": res["id"]})[0] == 200
    snap = Ledger(ledger_file, "t").snapshot()
    assert [f"{c.provider}.{c.op}" for c in snap.calls] == [
        "mailbox.send",
        "kv.set",
        "counter.increment",
        "tickets.create",
        "webhooks.post",
        "inventory.reserve",
        "inventory.release",
    ]
    assert snap.state == {"a": [1]}


def test_bad_requests_are_answered_not_crashed(server: FakesServer, ledger_file: str) -> None:
    status, _, body = request(server, "POST", "/fakes/payments/explode", {})
    assert status == 404 and "payments.explode" in body["error"]["message"]
    assert request(server, "POST", "/fakes/payments/charge", "{not json")[0] == 400
    status, _, body = request(server, "POST", "/fakes/mailbox/send", {"to": "a"})
    assert status == 400 and "subject" in body["error"]["message"]
    assert request(server, "GET", "/nowhere")[0] == 404
    assert request(server, "POST", "/v2/whatever", "")[0] == 404
    assert calls(ledger_file) == []


def test_bind_sets_thread_and_attempt_no_header_overrides(server: FakesServer, ledger_file: str) -> None:
    server.bind("other", 3, None, None)
    request(server, "POST", "/fakes/kv/set", {"key": "a", "value": 1})
    request(server, "POST", "/fakes/kv/set", {"key": "a", "value": 2}, {"X-Killdrill-Attempt": "5"})
    assert calls(ledger_file, "t") == []
    assert [c.attempt for c in Ledger(ledger_file, "other").calls()] == [3, 3]


def test_each_attempt_url_records_under_its_own_attempt_whichever_was_bound_last(
    server: FakesServer, ledger_file: str
) -> None:
    """Concurrent attempts (resumers, a paused zombie): a request is its sender's, not the last bound's."""
    url2, secret2 = server.attempt_url("a")
    url3, secret3 = server.attempt_url("b")
    assert secret2 != secret3 and secret2 != server.secret and server.attempt_url("a") == (url2, secret2)
    server.bind("t", 2, None, None, launch="a")
    server.bind("t", 3, None, None, launch="b")  # started last
    for url in (url2, url3, server.url):
        conn = http.client.HTTPConnection(urlsplit(url).netloc, timeout=10)
        body = json.dumps({"key": "k", "value": url})
        conn.request("POST", urlsplit(url).path + "/fakes/kv/set", body=body)
        assert conn.getresponse().status == 200
        conn.close()
    # An SDK that drops the base URL's path sends the attempt's secret as its API key.
    bearer = http.client.HTTPConnection(urlsplit(url2).netloc, timeout=10)
    bearer.request("POST", "/fakes/kv/set", body="{}", headers={"Authorization": f"Bearer {secret2}"})
    assert bearer.getresponse().status == 400  # authenticated (a bad body), so it was routed
    bearer.close()
    assert [c.attempt for c in Ledger(ledger_file, "t").calls()] == [2, 3, 3]
    unknown = http.client.HTTPConnection(urlsplit(url2).netloc, timeout=10)
    unknown.request("POST", "/not-a-secret/fakes/kv/set", body="{}")
    assert unknown.getresponse().status == 404
    unknown.close()


def test_configure_over_http_is_persisted(server: FakesServer, ledger_file: str) -> None:
    status, _, body = request(server, "POST", "/fakes/payments/configure", {"fail_first": 1})
    assert status == 200 and body["result"]["fail_first"] == 1
    assert Ledger(ledger_file, "t").settings("payments")["fail_first"] == 1


def test_concurrent_request_with_a_key_in_flight_gets_409(server: FakesServer, ledger_file: str) -> None:
    request(server, "POST", "/fakes/payments/configure", {"latency": 1.0})
    first: list[tuple[int, dict[str, str], dict[str, Any]]] = []
    t = threading.Thread(
        target=lambda: first.append(
            request(
                server, "POST", "/v1/payment_intents", "amount=100&currency=usd", {"Idempotency-Key": "k"}
            )
        )
    )
    t.start()
    ledger = Ledger(ledger_file, "t")
    deadline = time.monotonic() + 5
    while not ledger.snapshot().in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [f.key for f in ledger.snapshot().in_flight] == ["k"]
    status, headers, body = request(
        server, "POST", "/v1/payment_intents", "amount=100&currency=usd", {"Idempotency-Key": "k"}
    )
    t.join(10)
    assert status == 409 and headers["Stripe-Should-Retry"] == "true"
    assert body["error"]["code"] == "idempotency_key_in_use"
    assert first[0][0] == 200 and first[0][2]["object"] == "payment_intent"
    assert sorted(o for *_, o in calls(ledger_file)) == sorted([CONFLICT, CREATED])
    assert ledger.snapshot().in_flight == ()


def test_faults_over_http(server: FakesServer, ledger_file: str) -> None:
    form, key = "amount=7&currency=usd", {"Idempotency-Key": "k1"}
    request(server, "POST", "/fakes/payments/configure", {"fail_first": 1, "error_first": 1})
    status, headers, _ = request(server, "POST", "/v1/payment_intents", form, key)
    assert status == 503 and headers["Stripe-Should-Retry"] == "true"  # not stored: retryable
    status, headers, body = request(server, "POST", "/v1/payment_intents", form, key)
    assert status == 500 and body["error"]["type"] == "api_error"  # began and failed: stored
    status, headers, _ = request(server, "POST", "/v1/payment_intents", form, key)
    assert status == 500 and headers["Idempotent-Replayed"] == "true"

    key2 = {"Idempotency-Key": "k2"}
    request(server, "POST", "/fakes/payments/configure", {"indeterminate_first": 1})
    status, headers, body = request(server, "POST", "/v1/payment_intents", form, key2)
    assert (
        status == 500
        and headers["Stripe-Should-Retry"] == "true"
        and body["error"]["code"] == "indeterminate"
    )
    status, headers, body = request(server, "POST", "/v1/payment_intents", form, key2)
    assert status == 200 and headers["Idempotent-Replayed"] == "true" and body["id"] == "pi_0001"

    key3 = {"Idempotency-Key": "k3"}
    request(server, "POST", "/fakes/payments/configure", {"drop_first": 1})
    with pytest.raises(http.client.RemoteDisconnected):
        request(server, "POST", "/v1/payment_intents", form, key3)
    status, headers, body = request(server, "POST", "/v1/payment_intents", form, key3)
    assert status == 200 and headers["Idempotent-Replayed"] == "true" and body["id"] == "pi_0002"
    assert [o for *_, o in calls(ledger_file)] == [
        FAILED,
        FAILED,
        REPLAYED,
        CREATED,
        REPLAYED,
        CREATED,
        REPLAYED,
    ]


class StubSupervisor:
    """The supervisor's side of a control channel, reduced to: record the point, then go or kill."""

    def __init__(self, kill: bool) -> None:
        self.kill = kill
        self.address = f"@killdrill-test-{uuid.uuid4().hex}"
        self.points: list[tuple[str, dict[str, Any]]] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + self.address[1:])
        self.sock.listen(4)
        self.observe: Any = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        reader = conn.makefile("rb")
        hello = json.loads(reader.readline())
        assert hello["token"] == "tok"
        point = json.loads(reader.readline())["point"]
        self.points.append((point, self.observe() if self.observe else {}))
        if self.kill:
            conn.close()  # what the supervisor does when it kills the caller
        else:
            conn.sendall(b'{"go": true}\n')
            reader.readline()  # hold the connection until the client goes away
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("kill", [False, True])
def test_during_point_is_announced_after_commit(server: FakesServer, ledger_file: str, kill: bool) -> None:
    stub = StubSupervisor(kill)
    stub.observe = lambda: calls(ledger_file, "t2")
    try:
        server.bind("t2", 2, stub.address, "tok")
        form = "amount=9&currency=eur"
        if kill:
            with pytest.raises(http.client.RemoteDisconnected):
                request(server, "POST", "/v1/payment_intents", form, {"Idempotency-Key": "k"})
        else:
            assert request(server, "POST", "/v1/payment_intents", form, {"Idempotency-Key": "k"})[0] == 200
        stub.thread.join(5)
        # The supervisor saw the point when the charge was already committed: the provider did it.
        assert stub.points == [("during:payments.charge", [("payments", "charge", CREATED)])]
        assert [c.attempt for c in Ledger(ledger_file, "t2").calls()] == [2]
    finally:
        stub.close()


def test_get_payment_intent(server: FakesServer) -> None:
    _, _, created = request(server, "POST", "/v1/payment_intents", "amount=3&currency=usd&metadata[o]=1")
    status, _, body = request(server, "GET", f"/v1/payment_intents/{created['id']}")
    assert status == 200 and body["object"] == "payment_intent" and body["metadata"] == {"o": "1"}
    status, _, body = request(server, "GET", "/v1/payment_intents/pi_nope")
    assert status == 404 and body["error"]["code"] == "resource_missing"


def test_decode_form_nests_like_stripe() -> None:
    assert decode_form("amount=10&metadata[a]=x&payment_method_types[0]=card&expand[]=y&expand[]=z") == {
        "amount": 10,
        "metadata": {"a": "x"},
        "payment_method_types": ["card"],
        "expand": ["y", "z"],
    }


def test_stop_releases_the_port(ledger_file: str) -> None:
    srv = FakesServer(ledger_file)
    url = srv.start()
    assert srv.start() == url  # idempotent
    srv.stop()
    srv.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", urlsplit(url).port or 0), timeout=2).close()


def test_entry_point_refuses_a_corrupt_ledger_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a database\n" * 100)
    proc = subprocess.run(
        [sys.executable, "-m", "killdrill.fakes.http", "--ledger", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and str(bad) in proc.stderr and "Traceback" not in proc.stderr
