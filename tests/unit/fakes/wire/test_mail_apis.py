"""SendGrid's and Postmark's email APIs, which take no idempotency key: every accepted request is
an email; what each refuses is its own 4xx shape; each through its official SDK when installed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from killdrill.verdict.diagnosis import CauseName  # noqa: E402
from tests.wire_support import THREAD, outcomes  # noqa: E402

MAIL = {
    "personalizations": [{"to": [{"email": "ana@example.com"}]}],
    "from": {"email": "shop@example.com"},
    "subject": "Receipt",
    "content": [{"type": "text/plain", "value": "Paid"}],
}


@pytest.fixture
def server(ledger_file: str) -> Iterator[FakesServer]:
    with FakesServer(ledger_file, thread=THREAD) as srv:
        yield srv


@pytest.fixture
def url(server: FakesServer) -> str:
    return server.url


def test_sendgrid_sends_every_request_again_even_under_a_key(url: str, ledger_file: str) -> None:
    headers = {"Idempotency-Key": "receipt/o-7", "Authorization": "Bearer SG.x"}
    first = httpx.post(f"{url}/sendgrid/v3/mail/send", json=MAIL, headers=headers)
    again = httpx.post(f"{url}/sendgrid/v3/mail/send", json=MAIL, headers=headers)
    assert first.status_code == again.status_code == 202 and first.content == b""
    assert first.headers["X-Message-Id"] != again.headers["X-Message-Id"]
    assert outcomes(ledger_file, "sendgrid") == ["created", "created"]
    assert [c.key for c in Ledger(ledger_file, THREAD).calls("sendgrid")] == [None, None]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"personalizations": []}, "personalizations"),
        ({"personalizations": [{"to": []}]}, "personalizations.0.to"),
        ({"from": {"name": "Shop"}}, "from"),
        ({"subject": None}, "subject"),
        ({"content": []}, "content"),
    ],
)
def test_sendgrid_refuses_an_incomplete_mail_with_its_400_and_sends_nothing(
    url: str, ledger_file: str, change: dict[str, Any], field: str
) -> None:
    r = httpx.post(f"{url}/sendgrid/v3/mail/send", json={**MAIL, **change})
    assert r.status_code == 400
    (error,) = r.json()["errors"]
    assert error["field"] == field and error["message"] and error["help"]
    assert outcomes(ledger_file, "sendgrid") == []


def test_sendgrid_takes_a_template_for_subject_and_content_and_refuses_non_json(
    url: str, ledger_file: str
) -> None:
    templated = {k: v for k, v in MAIL.items() if k not in ("subject", "content")}
    assert (
        httpx.post(f"{url}/sendgrid/v3/mail/send", json={**templated, "template_id": "d-1"}).status_code
        == 202
    )
    for raw in (b"{not json", b"[1]", b"\xff"):
        r = httpx.post(f"{url}/sendgrid/v3/mail/send", content=raw)
        assert r.status_code == 400 and r.json()["errors"][0]["message"]
    assert outcomes(ledger_file, "sendgrid") == ["created"]


def test_the_sendgrid_sdk_sends_twice_when_called_twice(url: str, ledger_file: str) -> None:
    sendgrid = pytest.importorskip("sendgrid")
    from python_http_client.exceptions import BadRequestsError
    from sendgrid.helpers.mail import Mail

    client = sendgrid.SendGridAPIClient("SG.test", host=f"{url}/sendgrid")
    mail = Mail("shop@example.com", "ana@example.com", "Receipt", plain_text_content="Paid")
    assert client.send(mail).status_code == 202
    assert client.send(mail).headers["X-Message-Id"] == "sg_0002"
    with pytest.raises(BadRequestsError):
        client.send(Mail("shop@example.com", "ana@example.com", None, plain_text_content="Paid"))
    assert outcomes(ledger_file, "sendgrid") == ["created", "created"]


def test_a_mail_api_resent_is_diagnosed_as_taking_no_key() -> None:
    from killdrill.providers import spec

    assert [o.keyed for o in spec("sendgrid").operations] == [False]
    assert CauseName.UNKEYED_RESENT


EMAIL = {"From": "shop@example.com", "To": "ana@example.com", "Subject": "Receipt", "TextBody": "Paid"}


def test_postmark_sends_every_request_again_and_answers_its_result(url: str, ledger_file: str) -> None:
    first = httpx.post(f"{url}/postmark/email", json=EMAIL, headers={"Idempotency-Key": "k"}).json()
    again = httpx.post(f"{url}/postmark/email", json=EMAIL, headers={"Idempotency-Key": "k"}).json()
    assert first["ErrorCode"] == 0 and first["Message"] == "OK" and first["To"] == "ana@example.com"
    assert first["MessageID"] != again["MessageID"] and first["SubmittedAt"]
    assert outcomes(ledger_file, "postmark") == ["created", "created"]


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{oops", 402),
        (b'{"To": "a@example.com", "TextBody": "x"}', 300),
        (b'{"From": "s@example.com", "TextBody": "x"}', 300),
        (b'{"From": "s@example.com", "To": "a@example.com"}', 300),
    ],
)
def test_postmark_refuses_with_a_422_and_its_error_code(
    url: str, ledger_file: str, raw: bytes, code: int
) -> None:
    r = httpx.post(f"{url}/postmark/email", content=raw)
    assert r.status_code == 422 and r.json()["ErrorCode"] == code and r.json()["Message"]
    assert outcomes(ledger_file, "postmark") == []


def test_a_postmark_batch_sends_each_valid_message_and_refuses_the_rest(url: str, ledger_file: str) -> None:
    r = httpx.post(f"{url}/postmark/email/batch", json=[EMAIL, {**EMAIL, "From": ""}, EMAIL])
    assert r.status_code == 200
    assert [m["ErrorCode"] for m in r.json()] == [0, 300, 0]
    assert outcomes(ledger_file, "postmark") == ["created", "created"]
    too_many = httpx.post(f"{url}/postmark/email/batch", json=[EMAIL] * 501)
    assert too_many.status_code == 422 and too_many.json()["ErrorCode"] == 410
    assert len(outcomes(ledger_file, "postmark")) == 2


def test_the_postmark_search_finds_a_sent_message_by_metadata_unrecorded(url: str, ledger_file: str) -> None:
    httpx.post(f"{url}/postmark/email", json={**EMAIL, "Metadata": {"order": "o-7"}, "Tag": "receipt"})
    httpx.post(f"{url}/postmark/email", json={**EMAIL, "To": "bo@example.com"})
    found = httpx.get(f"{url}/postmark/messages/outbound?count=10&offset=0&metadata_order=o-7").json()
    assert found["TotalCount"] == 1 and found["Messages"][0]["Recipients"] == ["ana@example.com"]
    by_recipient = httpx.get(f"{url}/postmark/messages/outbound?count=10&offset=0&recipient=bo@example.com")
    assert by_recipient.json()["TotalCount"] == 1
    by_tag = httpx.get(f"{url}/postmark/messages/outbound?count=10&offset=0&tag=receipt&subject=Receipt")
    assert [m["Tag"] for m in by_tag.json()["Messages"]] == ["receipt"]
    assert httpx.get(f"{url}/postmark/messages/outbound?count=x").status_code == 422
    assert outcomes(ledger_file, "postmark") == ["created", "created"]


def test_postmarker_sends_twice_when_called_twice_and_finds_the_message(
    server: FakesServer, ledger_file: str
) -> None:
    postmarker = pytest.importorskip("postmarker.core")
    from postmarker.exceptions import ClientError

    # postmarker joins "/email" onto the host: the drill's secret travels as the server token
    client = postmarker.PostmarkClient(server_token=server.secret, root_api_url=server.url)
    sent = client.emails.send(From="shop@example.com", To="ana@example.com", Subject="Hi", TextBody="Paid")
    assert sent["ErrorCode"] == 0
    client.emails.send(From="shop@example.com", To="ana@example.com", Subject="Hi", TextBody="Paid")
    batch = client.emails.send_batch(EMAIL, {**EMAIL, "To": "bo@example.com"})
    assert [r["ErrorCode"] for r in batch] == [0, 0]
    with pytest.raises(ClientError) as refused:
        client.emails.send(From="shop@example.com", To="", Subject="Hi", TextBody="Paid")
    assert refused.value.error_code == 300
    found = client.messages.outbound.all(recipient="bo@example.com")
    assert [m.MessageID for m in found] == [batch[1]["MessageID"]]
    assert outcomes(ledger_file, "postmark") == ["created"] * 4
