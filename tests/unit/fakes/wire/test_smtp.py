"""The SMTP fake: plain ``smtplib`` against a real SMTP server, every message a ``mailbox.send``."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

pytest.importorskip("aiosmtpd")

from killdrill.fakes import connect
from killdrill.fakes.wire.smtp import SmtpFake
from killdrill.ledger import Ledger
from tests.wire_support import THREAD


@pytest.fixture
def smtp(ledger_file: str) -> Iterator[SmtpFake]:
    with SmtpFake(ledger_file, thread=THREAD) as fake:
        yield fake


def message(**headers: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "shop@example.com"
    msg["To"] = "ana@example.com"
    msg["Subject"] = "Your receipt"
    for name, value in headers.items():
        msg[name.replace("_", "-")] = value
    msg.set_content("Paid 42.00 GBP.")
    return msg


def send(fake: SmtpFake, msg: EmailMessage) -> None:
    assert fake.address is not None
    host, port = fake.address.split(":")
    with smtplib.SMTP(host, int(port), timeout=10) as client:
        client.send_message(msg)


def test_listens_on_loopback_and_records_a_message_as_mailbox_send(smtp: SmtpFake, ledger_file: str) -> None:
    assert smtp.address is not None and smtp.address.startswith("127.0.0.1:")
    send(smtp, message(Message_ID="<r-1@shop>"))
    (call,) = Ledger(ledger_file, THREAD).calls()
    assert (call.provider, call.op, call.key, call.outcome) == ("mailbox", "send", "<r-1@shop>", "created")
    assert call.payload["to"] == "ana@example.com" and call.payload["subject"] == "Your receipt"
    assert call.payload["from"] == "shop@example.com" and len(call.payload["body_sha256"]) == 64


def test_an_idempotency_header_is_the_key_before_the_message_id(smtp: SmtpFake, ledger_file: str) -> None:
    send(smtp, message(Message_ID="<r-2@shop>", X_Idempotency_Key="receipt:o-2"))
    assert Ledger(ledger_file, THREAD).calls()[0].key == "receipt:o-2"


def test_without_message_id_there_is_no_key(smtp: SmtpFake, ledger_file: str) -> None:
    send(smtp, message())
    assert Ledger(ledger_file, THREAD).calls()[0].key is None


def test_nothing_is_deduplicated(smtp: SmtpFake, ledger_file: str) -> None:
    send(smtp, message(Message_ID="<r-3@shop>"))
    send(smtp, message(Message_ID="<r-3@shop>"))
    assert [c.outcome for c in Ledger(ledger_file, THREAD).calls()] == ["created", "created"]
    assert connect(ledger_file, thread=THREAD).mailbox.lookup("<r-3@shop>")["deliveries"] == 2


def test_the_body_digest_ignores_mime_boundaries_and_dates(smtp: SmtpFake, ledger_file: str) -> None:
    for date in ("Mon, 01 Dec 2026 10:00:00 +0000", "Tue, 02 Dec 2026 11:00:00 +0000"):
        msg = message(Date=date)
        msg.add_alternative("<p>Paid 42.00 GBP.</p>", subtype="html")  # a fresh random boundary each time
        send(smtp, msg)
    a, b = Ledger(ledger_file, THREAD).calls()
    assert a.payload == b.payload


def test_recipients_come_from_the_envelope_sorted(smtp: SmtpFake, ledger_file: str) -> None:
    assert smtp.address is not None
    host, port = smtp.address.split(":")
    with smtplib.SMTP(host, int(port), timeout=10) as client:
        client.send_message(message(), to_addrs=["zoe@example.com", "ana@example.com"])
    assert Ledger(ledger_file, THREAD).calls()[0].payload["to"] == "ana@example.com, zoe@example.com"


def test_a_caller_killed_at_during_mailbox_send_never_hears_250(
    smtp: SmtpFake, ledger_file: str, tmp_path: Path
) -> None:
    smtp.bind(THREAD, 1, str(tmp_path / "no-supervisor.sock"), "token")  # the channel is gone
    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(smtp, message(Message_ID="<r-4@shop>"))
    assert [c.outcome for c in Ledger(ledger_file, THREAD).calls()] == ["created"]  # yet it went out


def test_killdrill_and_the_http_fakes_do_not_import_the_wire_extra() -> None:
    import subprocess
    import sys

    code = (
        "import sys, killdrill, killdrill.drill, killdrill.fakes.http;"
        "heavy = ('aiosmtpd', 'cryptography', 'httpx', 'requests', 'stripe', 'gocardless_pro');"
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_agent_that_logs_in_is_served_as_it_is(smtp: SmtpFake, ledger_file: str) -> None:
    assert smtp.address is not None
    host, port = smtp.address.split(":")
    with smtplib.SMTP(host, int(port), timeout=10) as client:
        client.login("apikey", "SG.production-secret")
        client.send_message(message(Message_ID="<r-5@shop>"))
    assert [c.key for c in Ledger(ledger_file, THREAD).calls()] == ["<r-5@shop>"]


def test_starttls_upgrades_the_connection_and_the_message_is_recorded(
    smtp: SmtpFake, ledger_file: str
) -> None:
    assert smtp.address is not None
    host, port = smtp.address.split(":")
    with smtplib.SMTP(host, int(port), timeout=10) as client:
        client.ehlo()
        assert client.has_extn("starttls")
        code, _ = client.starttls()  # smtplib's default context: no certificate check, as at port 587
        assert code == 220 and client.sock is not None and client.sock.version() is not None  # TLS now
        client.login("shop@example.com", "app-password")
        client.send_message(message(Message_ID="<tls-1@shop>"))
    (call,) = Ledger(ledger_file, THREAD).calls()
    assert (call.key, call.outcome, call.payload["subject"]) == ("<tls-1@shop>", "created", "Your receipt")


def test_a_verifying_context_refuses_the_fakes_own_certificate(smtp: SmtpFake, ledger_file: str) -> None:
    import ssl

    assert smtp.address is not None
    host, port = smtp.address.split(":")
    with smtplib.SMTP(host, int(port), timeout=10) as client, pytest.raises(ssl.SSLCertVerificationError):
        client.starttls(context=ssl.create_default_context())
    assert Ledger(ledger_file, THREAD).calls() == []


def test_a_caller_killed_at_during_mailbox_send_over_tls_never_hears_250(
    smtp: SmtpFake, ledger_file: str, tmp_path: Path
) -> None:
    assert smtp.address is not None
    host, port = smtp.address.split(":")
    smtp.bind(THREAD, 1, str(tmp_path / "no-supervisor.sock"), "token")  # the channel is gone
    with smtplib.SMTP(host, int(port), timeout=10) as client, pytest.raises(smtplib.SMTPServerDisconnected):
        client.starttls()
        client.send_message(message(Message_ID="<tls-2@shop>"))
    assert [c.outcome for c in Ledger(ledger_file, THREAD).calls()] == ["created"]  # yet it went out
