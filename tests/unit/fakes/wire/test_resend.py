"""Resend's documented idempotency rules for ``POST /emails``, one test each, over plain HTTP
(the ``resend`` SDK posts this JSON with ``requests``), and the SDK itself when installed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from killdrill.fakes import advance_clock  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes, while_in_flight  # noqa: E402

EMAIL = {"from": "shop@example.com", "to": ["ana@example.com"], "subject": "Receipt", "html": "<p>Paid</p>"}


@pytest.fixture
def base(ledger_file: str) -> Iterator[str]:
    with FakesServer(ledger_file, thread=THREAD) as srv:
        yield f"{srv.url}/resend"


def send(base: str, key: str | None, **body: Any) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return httpx.post(f"{base}/emails", json={**EMAIL, **body}, headers=headers)


def test_the_same_key_answers_the_first_email_and_sends_no_second(base: str, ledger_file: str) -> None:
    first = send(base, "receipt/o-7")
    assert first.status_code == 200 and set(first.json()) == {"id"}
    assert send(base, "receipt/o-7").json() == first.json()
    assert httpx.get(f"{base}/emails/{first.json()['id']}").json()["subject"] == "Receipt"
    assert outcomes(ledger_file, "resend") == ["created", "replayed"]


def test_without_a_key_every_request_sends(base: str, ledger_file: str) -> None:
    assert send(base, None).json() != send(base, None).json()
    assert outcomes(ledger_file, "resend") == ["created", "created"]


def test_the_same_key_with_another_payload_is_409_invalid_idempotent_request(
    base: str, ledger_file: str
) -> None:
    send(base, "k")
    r = send(base, "k", subject="Other")
    assert r.status_code == 409 and r.json()["name"] == "invalid_idempotent_request"
    assert r.json()["statusCode"] == 409 and r.json()["message"]


def test_a_key_in_progress_is_409_concurrent_idempotent_requests(base: str, ledger_file: str) -> None:
    r = while_in_flight(ledger_file, "resend", lambda: send(base, "slow"), lambda: send(base, "slow"))
    assert r.status_code == 409 and r.json()["name"] == "concurrent_idempotent_requests"


def test_keys_are_up_to_256_characters(base: str, ledger_file: str) -> None:
    assert send(base, "k" * 256).status_code == 200
    r = send(base, "k" * 257)
    assert r.status_code == 400 and r.json()["name"] == "invalid_idempotency_key"
    assert outcomes(ledger_file, "resend") == ["created"]


def test_a_key_lives_24_hours(base: str, ledger_file: str) -> None:
    first = send(base, "daily").json()
    advance_clock(Ledger(ledger_file, THREAD), 24 * 3600 + 1)
    assert send(base, "daily").json() != first


def test_an_incomplete_email_is_422_and_nothing_sent(base: str, ledger_file: str) -> None:
    for body in ({"to": None}, {"html": None}):
        r = send(base, "k", **body)
        assert r.status_code == 422 and r.json()["name"] == "missing_required_field"
    assert httpx.post(f"{base}/emails", content=b"[1]").json()["name"] == "validation_error"
    assert outcomes(ledger_file, "resend") == []


def test_the_resend_sdk_replays_under_its_idempotency_key(base: str, ledger_file: str) -> None:
    resend = pytest.importorskip("resend")
    saved = resend.api_url, resend.api_key
    resend.api_url, resend.api_key = base, "re_test_x"
    try:
        params: Any = dict(EMAIL)
        first = resend.Emails.send(params, {"idempotency_key": "receipt/o-7"})
        assert resend.Emails.send(params, {"idempotency_key": "receipt/o-7"})["id"] == first["id"]
        with pytest.raises(resend.exceptions.MissingRequiredFieldsError):
            resend.Emails.send({**params, "subject": ""})
    finally:
        resend.api_url, resend.api_key = saved
    assert outcomes(ledger_file, "resend") == ["created", "replayed"]
