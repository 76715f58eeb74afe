"""Calls through the served fakes (HTTP, the wire routes, SMTP) are their sender's: the fence
route over HTTP, the caller's pid, and one SMTP address per launch."""

from __future__ import annotations

import json
import os
import smtplib
import subprocess
import sys
from email.message import EmailMessage

import pytest

from killdrill.fakes.http import FakesServer
from killdrill.ledger import Ledger
from tests.unit.fakes.test_http import request

THREAD = "t"


def test_fence_over_http_is_served_like_the_in_process_fence(server: FakesServer, ledger_file: str) -> None:
    """``POST /fakes/counter/fence`` was a 404 though ``fence=`` on writes worked over HTTP."""
    status, _, body = request(server, "POST", "/fakes/counter/fence", {"resource": "stock", "token": 1})
    assert (status, body) == (200, {"result": 0})
    request(server, "POST", "/fakes/counter/increment", {"name": "stock", "by": 3, "fence": 1})
    status, _, body = request(server, "POST", "/fakes/counter/fence", {"resource": "stock", "token": 2})
    assert (status, body) == (200, {"result": 1})  # token 1 wrote: the new holder learns it
    status, _, body = request(server, "POST", "/fakes/counter/fence", {"resource": "stock", "token": 1})
    assert status == 409 and body["error"]["code"] == "stale_fence"
    assert [c.op for c in Ledger(ledger_file, THREAD).calls()] == ["increment"]  # a fence is no call


_CLIENT = """
import http.client, json, os, sys
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1])
conn = http.client.HTTPConnection(url.netloc, timeout=10)
key = {"Idempotency-Key": "k-" + sys.argv[2]}
conn.request("POST", url.path + sys.argv[2], body=sys.argv[3], headers=key)
assert conn.getresponse().status == 200
print(os.getpid())
"""


@pytest.mark.parametrize("path", ["/fakes/kv/set", "/hooks/orders"])
def test_a_call_over_http_is_recorded_with_its_senders_pid(
    server: FakesServer, ledger_file: str, path: str
) -> None:
    """The generic route and a wire route record the pid of the process that called, not 0."""
    assert server.url is not None
    body = json.dumps({"key": "a", "value": 1} if path.startswith("/fakes") else {"order": "o-1"})
    out = subprocess.run(
        [sys.executable, "-c", _CLIENT, server.url, path, body], capture_output=True, text=True, check=True
    )
    (call,) = Ledger(ledger_file, THREAD).calls()
    assert call.pid == int(out.stdout) and call.pid != os.getpid()


def _message(ident: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"], msg["Message-ID"] = "shop@x", "ana@x", "receipt", ident
    msg.set_content("Paid.")
    return msg


def _send(address: str, msg: EmailMessage) -> None:
    host, port = address.split(":")
    with smtplib.SMTP(host, int(port), timeout=10) as client:
        client.send_message(msg)


def test_each_launch_has_its_own_smtp_address_and_its_mail_is_its_own(ledger_file: str) -> None:
    """A paused zombie's mail was recorded as the resumer's (the launch bound last): SMTP now has
    one address per launch, as HTTP has one URL per launch."""
    pytest.importorskip("aiosmtpd")
    from killdrill.fakes.wire.smtp import SmtpFake

    with SmtpFake(ledger_file, thread=THREAD) as fake:
        zombie, resumer = fake.attempt_address("a"), fake.attempt_address("b")
        assert len({zombie, resumer, fake.address}) == 3 and fake.attempt_address("a") == zombie
        fake.bind(THREAD, 1, launch="a")
        fake.bind(THREAD, 2, launch="b")  # started last
        _send(zombie, _message("<z@shop>"))
        _send(resumer, _message("<r@shop>"))
        _send(fake.address or "", _message("<shared@shop>"))
    calls = Ledger(ledger_file, THREAD).calls()
    assert [(c.key, c.attempt) for c in calls] == [("<z@shop>", 1), ("<r@shop>", 2), ("<shared@shop>", 2)]
    assert {c.pid for c in calls} == {os.getpid()}  # the sender is this test process, not pid 0


def test_an_smtp_sender_in_another_process_is_recorded_with_its_pid(ledger_file: str) -> None:
    pytest.importorskip("aiosmtpd")
    from killdrill.fakes.wire.smtp import SmtpFake

    code = (
        "import os, smtplib, sys\n"
        "from email.message import EmailMessage\n"
        "m = EmailMessage(); m['From'] = 'a@x'; m['To'] = 'b@x'; m['Message-ID'] = '<p@x>'\n"
        "m.set_content('x')\n"
        "h, p = sys.argv[1].split(':')\n"
        "smtplib.SMTP(h, int(p), timeout=10).send_message(m)\n"
        "print(os.getpid())\n"
    )
    with SmtpFake(ledger_file, thread=THREAD) as fake:
        out = subprocess.run([sys.executable, "-c", code, fake.address or ""], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    (call,) = Ledger(ledger_file, THREAD).calls()
    assert call.pid == int(out.stdout)


def test_unknown_peer_is_pid_0() -> None:
    from killdrill.fakes.peer import peer_pid

    assert peer_pid(("127.0.0.1", 1), ("127.0.0.1", 2)) == 0
    assert peer_pid(("not-an-ip", 1), ("127.0.0.1", 2)) == 0
