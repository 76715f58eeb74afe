"""The runtime context on the wire (``killdrill.integrations._wire`` and the fakes that read it):
the clients' patches add it only to calls to the served fakes, the fakes record it only from a
request that passed their guard, and the SMTP fake records the message the agent sent."""

from __future__ import annotations

import http.server
import json
import smtplib
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from killdrill.agent import CONTEXT_HEADER, in_runtime
from killdrill.fakes.http import FakesServer
from killdrill.integrations import _wire
from killdrill.ledger import Ledger

httpx = pytest.importorskip("httpx")
requests = pytest.importorskip("requests")

CTX = {"runtime": "acme", "unit": "task", "name": "charge", "run": "r-1", "attempt": 2}


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakesServer]:
    _wire.activate()
    server = FakesServer(tmp_path / "l.sqlite")
    monkeypatch.setenv("KILLDRILL_FAKES_URL", server.start())
    try:
        yield server
    finally:
        server.stop()
        _wire.deactivate()


def _calls(server: FakesServer) -> list[Any]:
    return Ledger(server.ledger_url, "default").calls()


def test_every_client_carries_the_context_to_the_fakes_and_none_outside_one(fakes: FakesServer) -> None:
    url = fakes.url
    with in_runtime(**CTX):
        requests.post(f"{url}/hooks/a", json={"n": 1}).raise_for_status()
        httpx.post(f"{url}/fakes/payments/charge", json={"amount": 5, "currency": "usd"}).raise_for_status()
        body = json.dumps({"title": "t"}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{url}/fakes/tickets/create", data=body))
    requests.post(f"{url}/hooks/b", json={"n": 2}).raise_for_status()
    assert [c.context for c in _calls(fakes)] == [CTX, CTX, CTX, None]


class _Echo(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_POST(self) -> None:
        _Echo.seen.append(self.headers.get(CONTEXT_HEADER))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_call_to_another_host_carries_nothing(fakes: FakesServer) -> None:
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        there = f"http://127.0.0.1:{other.server_address[1]}/x"
        with in_runtime(**CTX):
            requests.post(there, json={})
            httpx.post(there, json={})
    finally:
        other.shutdown()
        other.server_close()
    assert _Echo.seen == [None, None]


def test_the_context_is_read_only_behind_the_guard(fakes: FakesServer) -> None:
    assert fakes.url is not None
    port = fakes.url.rsplit("/", 1)[0]
    forged = {CONTEXT_HEADER: json.dumps(CTX)}
    assert httpx.post(f"{port}/hooks/a", json={}, headers=forged).status_code == 404  # no secret
    bad = httpx.post(f"{fakes.url}/hooks/a", json={}, headers={CONTEXT_HEADER: "[1, 2]"})
    assert bad.status_code == 400 and "not a JSON object" in bad.text
    assert _calls(fakes) == []


def test_to_fakes_is_the_fakes_port_on_a_loopback_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILLDRILL_FAKES_URL", "http://127.0.0.1:4321/SECRET")
    monkeypatch.setenv("KILLDRILL_SMTP", "127.0.0.1:2525")
    assert _wire.to_fakes("KILLDRILL_FAKES_URL", "localhost", 4321)
    assert not _wire.to_fakes("KILLDRILL_FAKES_URL", "127.0.0.1", 4322)
    assert not _wire.to_fakes("KILLDRILL_FAKES_URL", "api.stripe.com", 4321)
    assert _wire.to_fakes("KILLDRILL_SMTP", "127.0.0.1", 2525)
    monkeypatch.delenv("KILLDRILL_SMTP")
    assert not _wire.to_fakes("KILLDRILL_SMTP", "127.0.0.1", 2525)


def test_mail_carries_the_context_and_is_recorded_as_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("aiosmtpd")
    from killdrill.fakes.wire.smtp import SmtpFake

    _wire.activate()
    long = {**CTX, "id": "x" * 1500}  # folded over several header lines, unfolded by the fake
    message = "From: a@x\r\nTo: b@x\r\nSubject: receipt\r\n\r\nPaid.\r\n"
    with SmtpFake(str(tmp_path / "l.sqlite")) as fake:
        assert fake.address is not None
        host, port = fake.address.rsplit(":", 1)
        monkeypatch.setenv("KILLDRILL_SMTP", fake.address)
        try:
            with smtplib.SMTP(host, int(port)) as smtp:
                smtp.sendmail("a@x", ["b@x"], message)
                with in_runtime(**CTX):
                    smtp.sendmail("a@x", ["b@x"], message)
                with in_runtime(**long):
                    smtp.sendmail("a@x", ["b@x"], message.encode())
        finally:
            _wire.deactivate()
    calls = Ledger(tmp_path / "l.sqlite", "default").calls()
    assert [c.context for c in calls] == [None, CTX, long]
    assert calls[0].payload == calls[1].payload == calls[2].payload  # the header is not the mail's
