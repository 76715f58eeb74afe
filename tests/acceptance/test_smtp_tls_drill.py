"""An agent that verifies the mail server's certificate (``starttls`` with
``ssl.create_default_context()``, as a production sender should), drilled unmodified with
``--smtp-fake``: the drill gives it ``SSL_CERT_FILE`` with the fake's loopback CA, so its TLS
verifies, over STARTTLS or implicit TLS (``KILLDRILL_SMTPS``); the gated sender is exactly-once
at the send, the ungated one caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from killdrill.drill import Drill, DrillOptions

pytest.importorskip("aiosmtpd")
pytest.importorskip("cryptography")

AGENT = """
import json, os, smtplib, ssl, sys, urllib.request
from email.message import EmailMessage
from pathlib import Path

state = Path(sys.argv[1])
mid = "<receipt-" + os.environ["KILLDRILL_THREAD"] + "@shop>"
if state.exists() and "--bug" not in sys.argv:  # claimed before a kill: did the mail go out?
    ask = urllib.request.Request(
        os.environ["KILLDRILL_FAKES_URL"] + "/fakes/mailbox/lookup",
        data=json.dumps({"ref": mid}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(ask) as answer:  # the drill sets no proxy
        if json.load(answer)["result"] is not None:
            sys.exit(0)
state.write_text(mid)
msg = EmailMessage()
msg["From"], msg["To"], msg["Subject"] = "shop@example.com", "ana@example.com", "Receipt"
msg["Message-ID"] = mid
msg.set_content("Paid 42.00 GBP.")
if "--implicit" in sys.argv:  # TLS from the first byte, as at a provider's port 465
    host, port = os.environ["KILLDRILL_SMTPS"].split(":")
    with smtplib.SMTP_SSL(host, int(port), timeout=10, context=ssl.create_default_context()) as client:
        client.send_message(msg)
    sys.exit(0)
host, port = os.environ["KILLDRILL_SMTP"].split(":")
with smtplib.SMTP(host, int(port), timeout=10) as client:
    client.starttls(context=ssl.create_default_context())  # verifies the certificate and host name
    client.send_message(msg)
"""


def drill(tmp_path: Path, *extra: str, launcher: str = "spawn") -> Drill:
    tmp_path.mkdir(parents=True, exist_ok=True)
    agent = tmp_path / "receipt.py"
    agent.write_text(AGENT)
    options = DrillOptions(
        root=tmp_path / "runs",
        http_fakes=True,
        smtp_fake=True,
        timeout=60,
        discovery_runs=1,
        launcher=launcher,
    )
    return Drill(["python", str(agent), "{workdir}/claimed", *extra], options)


def test_a_verifying_sender_is_drilled_unmodified_exactly_once_and_its_ungated_form_is_caught(
    tmp_path: Path,
) -> None:
    with drill(tmp_path) as d:
        assert d.points() == ["during:mailbox.send"]
        result = d.run_case("during:mailbox.send")
        assert result.ok, result.text()
    with drill(tmp_path / "bug", "--bug") as d:
        caught = d.run_case("during:mailbox.send")
        assert "duplicate_effect" in caught.kinds, caught.text()


def test_a_verifying_sender_over_implicit_tls_is_drilled_unmodified(tmp_path: Path) -> None:
    with drill(tmp_path, "--implicit", launcher="fork") as d:  # a fork of a template gets it too
        assert d.points() == ["during:mailbox.send"]
        result = d.run_case("during:mailbox.send")
        assert result.ok, result.text()
