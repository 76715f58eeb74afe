"""Hostile and malformed requests to the message providers' fakes are answered as each provider
answers a bad request (a 4xx, or Slack's ``ok: false``), never a 500, and record nothing."""

from __future__ import annotations

import itertools
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD  # noqa: E402

ACCOUNT = "AC" + "0" * 32
EMAIL = {"From": "s@example.com", "To": "a@example.com", "TextBody": "x", "Metadata": {"o": "1"}}
VALID: dict[str, tuple[str, dict[str, Any]]] = {  # a body each provider accepts, then made odd field by field
    "sendgrid": (
        "/sendgrid/v3/mail/send",
        {
            "personalizations": [{"to": [{"email": "a@example.com"}]}],
            "from": {"email": "s@example.com"},
            "subject": "s",
            "content": [{"type": "text/plain", "value": "x"}],
        },
    ),
    "postmark": ("/postmark/email", EMAIL),
    "slack": ("/slack/api/chat.postMessage", {"token": "x", "channel": "C1", "text": "t", "blocks": []}),
    "twilio": (
        f"/twilio/2010-04-01/Accounts/{ACCOUNT}/Messages.json",
        {"To": "+15550001111", "From": "+15550002222", "Body": "x"},
    ),
    "github": (
        "/github/repos/acme/shop/issues",
        {"title": "t", "body": "b", "labels": ["bug"], "assignees": []},
    ),
}
ODD = ([1], {"x": [None]}, None, "x" * 5000)  # a list, an object, null, a long text in every field
RAW = (b"", b"null", b"[]", b"{}", b'{"a":', b"[" * 3000 + b"]" * 3000, b"\xff\xfe", b"%zz=%%&&=")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    ledger = str(tmp_path_factory.mktemp("hostile") / "ledger.sqlite")
    with FakesServer(ledger, thread=THREAD) as srv:
        yield srv.url, ledger


def bodies(valid: dict[str, Any], form: bool) -> Iterator[bytes]:
    yield from RAW
    for field_, value in itertools.product(valid, ODD):
        odd = {**valid, field_: value}
        if form:  # a form carries strings; a structured value is sent as its JSON
            text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in odd.items()}
            yield urllib.parse.urlencode(text).encode()
        else:
            yield json.dumps(odd).encode()


@pytest.mark.parametrize("name", sorted(VALID))
def test_no_malformed_body_is_answered_with_a_500(server: tuple[str, str], name: str) -> None:
    url, _ = server
    path, valid = VALID[name]
    form = name in ("twilio", "slack")
    kind = "application/x-www-form-urlencoded" if form else "application/json"
    with httpx.Client(base_url=url) as client:
        for body in bodies(valid, form):
            r = client.post(path, content=body, headers={"Content-Type": kind})
            assert r.status_code < 500, (name, body[:80], r.text[:200])


def test_what_was_stored_from_odd_but_accepted_bodies_reads_back(server: tuple[str, str]) -> None:
    url, _ = server
    with httpx.Client(base_url=url) as client:
        issue = client.post(VALID["github"][0], json={"title": "t", "labels": [{"name": "bug"}]})
        assert issue.status_code == 201
        for path in (
            "/github/repos/acme/shop/issues?state=all&labels=bug",
            "/postmark/messages/outbound?count=500&offset=0&metadata_a=b",
            f"/twilio/2010-04-01/Accounts/{ACCOUNT}/Messages.json?PageSize=99999999999",
            "/slack/api/conversations.history?channel=C1&limit=-5&token=x",
        ):
            assert client.get(path).status_code < 500, path


@pytest.mark.slow  # 15 cases, ~6 s: each provider's error shape is also checked per push by its own tests
@pytest.mark.parametrize("name", sorted(VALID))
@pytest.mark.parametrize(
    ("fault", "status"), [("error_first", 500), ("rate_limit_first", 429), ("indeterminate_first", 500)]
)
def test_an_injected_fault_is_answered_in_the_providers_error_shape(
    ledger_file: str, name: str, fault: str, status: int
) -> None:
    path, valid = VALID[name]
    form = name in ("twilio", "slack")
    Ledger(ledger_file, THREAD).configure(name, **{fault: 1})
    with FakesServer(ledger_file, thread=THREAD) as srv, httpx.Client(base_url=srv.url) as client:

        def send() -> httpx.Response:
            return client.post(path, data=valid) if form else client.post(path, json=valid)

        r = send()
        assert r.status_code == status, r.text
        shape = {
            "sendgrid": lambda b: b["errors"][0]["message"],
            "postmark": lambda b: b["ErrorCode"] and b["Message"],
            "slack": lambda b: b["ok"] is False and b["error"],
            "twilio": lambda b: b["code"] and b["message"] and b["status"] == status,
            "github": lambda b: b["message"] and b["documentation_url"],
        }[name]
        assert shape(r.json()), r.text
        assert send().status_code in (200, 201, 202)  # the budget spent, the next request lands
