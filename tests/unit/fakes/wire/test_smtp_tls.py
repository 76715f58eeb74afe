"""The SMTP fake's TLS as a verifying agent meets it: its certificate is issued by a CA of its
own, constrained to the loopback, written with the machine's own CAs into the file the drill
gives every process as ``SSL_CERT_FILE``."""

from __future__ import annotations

import os
import smtplib
import ssl
import subprocess
import sys
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

pytest.importorskip("aiosmtpd")
x509 = pytest.importorskip("cryptography.x509")

from killdrill.fakes.wire.smtp import SmtpFake, system_trust  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD  # noqa: E402


@pytest.fixture
def smtp(ledger_file: str, tmp_path: Path) -> Iterator[SmtpFake]:
    with SmtpFake(ledger_file, thread=THREAD, trust_file=str(tmp_path / "trust.pem")) as fake:
        yield fake


def message(mid: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"], msg["Message-ID"] = (
        "shop@example.com",
        "ana@example.com",
        "Hi",
        mid,
    )
    msg.set_content("Paid.")
    return msg


def test_a_verifying_context_that_trusts_the_file_upgrades_at_127_0_0_1_and_localhost(
    smtp: SmtpFake, ledger_file: str
) -> None:
    assert smtp.address is not None and smtp.trusted is not None
    port = int(smtp.address.split(":")[1])
    for n, host in enumerate(("127.0.0.1", "localhost")):
        context = ssl.create_default_context(cafile=smtp.trusted)
        context.verify_flags |= ssl.VERIFY_X509_STRICT  # Python 3.13's default: RFC 5280 checked strictly
        with smtplib.SMTP(host, port, timeout=10) as client:
            client.starttls(context=context)  # the hostname is checked too
            client.send_message(message(f"<v-{n}@shop>"))
    assert [c.key for c in Ledger(ledger_file, THREAD).calls()] == ["<v-0@shop>", "<v-1@shop>"]


AGENT = """
import os, smtplib, ssl, sys
host, port = os.environ["KILLDRILL_SMTP"].split(":")
with smtplib.SMTP(host, int(port), timeout=10) as client:
    if sys.argv[1] == "ssl":
        context = ssl.create_default_context()
    else:
        import httpx
        context = httpx.create_ssl_context()
    client.starttls(context=context)
    mail = "Subject: hi\\r\\nMessage-ID: <" + sys.argv[1] + ">\\r\\n\\r\\nx"
    client.sendmail("shop@example.com", ["ana@example.com"], mail)
"""


def test_an_agent_given_the_file_as_ssl_cert_file_verifies_with_python_and_httpx_defaults(
    smtp: SmtpFake, ledger_file: str
) -> None:
    assert smtp.address is not None and smtp.trusted is not None
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    env["KILLDRILL_SMTP"] = smtp.address
    for client in ("ssl", "httpx"):
        refused = subprocess.run(
            [sys.executable, "-c", AGENT, client], env=env, capture_output=True, text=True
        )
        assert refused.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr  # not trusted
        done = subprocess.run(
            [sys.executable, "-c", AGENT, client],
            env={**env, "SSL_CERT_FILE": smtp.trusted},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
    assert [c.key for c in Ledger(ledger_file, THREAD).calls()] == ["<ssl>", "<httpx>"]


def test_the_file_keeps_the_machines_own_cas_and_the_fakes_ca_vouches_for_the_loopback_only(
    smtp: SmtpFake,
) -> None:
    assert smtp.trusted is not None
    pem = Path(smtp.trusted).read_bytes()
    own = system_trust()
    assert own and pem.startswith(own.rstrip(b"\n"))  # the machine's CAs, unchanged
    ca = x509.load_pem_x509_certificate(pem[len(own.rstrip(b"\n")) :])
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    permitted = {str(n.value) for n in constraints.value.permitted_subtrees}
    assert permitted == {"localhost", "127.0.0.1/32"}
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    context = ssl.create_default_context(cafile=smtp.trusted)
    assert len(context.get_ca_certs()) == pem.count(b"-----BEGIN CERTIFICATE-----")  # every one loads


def system_trust_file() -> str | None:
    """The machine's own CA file (None: Python's defaults)."""
    paths = ssl.get_default_verify_paths()
    return paths.cafile or paths.openssl_cafile


def test_without_a_trust_file_nothing_is_written(ledger_file: str) -> None:
    with SmtpFake(ledger_file, thread=THREAD) as fake:
        assert fake.trusted is None


def test_implicit_tls_is_served_on_a_port_of_its_own_per_launch_and_recorded_under_its_attempt(
    smtp: SmtpFake, ledger_file: str
) -> None:
    plain = smtp.attempt_address("launch-1")
    implicit = smtp.attempt_tls_address("launch-1")
    assert implicit is not None and implicit != plain and smtp.attempt_tls_address("launch-1") == implicit
    smtp.bind(THREAD, 2, launch="launch-1")
    host, port = implicit.split(":")
    assert smtp.trusted is not None
    with smtplib.SMTP_SSL(host, int(port), context=ssl.create_default_context(cafile=smtp.trusted)) as client:
        assert not client.has_extn("starttls")  # TLS already: nothing to upgrade
        client.login("shop@example.com", "app-password")
        client.send_message(message("<ssl-1@shop>"))
    with pytest.raises(ssl.SSLCertVerificationError):  # a verifier that does not trust the fake's CA
        smtplib.SMTP_SSL(host, int(port), context=ssl.create_default_context(cafile=system_trust_file()))
    (call,) = Ledger(ledger_file, THREAD).calls()
    assert (call.key, call.attempt, call.outcome) == ("<ssl-1@shop>", 2, "created")
