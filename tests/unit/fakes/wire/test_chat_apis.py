"""Slack's chat.postMessage and Twilio's Messages API, which take no idempotency key: every
accepted call is a message; what each refuses is its own error shape; each through its official
SDK when installed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes  # noqa: E402

AUTH = {"Authorization": "Bearer xoxb-test"}
ACCOUNT = "AC" + "0" * 31 + "1"


@pytest.fixture
def url(ledger_file: str) -> Iterator[str]:
    with FakesServer(ledger_file, thread=THREAD) as srv:
        yield srv.url


def post(url: str, **args: Any) -> Any:
    return httpx.post(f"{url}/slack/api/chat.postMessage", json=args, headers=AUTH).json()


def test_slack_posts_every_call_again_even_with_a_client_msg_id(url: str, ledger_file: str) -> None:
    first = post(url, channel="C1", text="Deployed", client_msg_id="d-7")
    again = post(url, channel="C1", text="Deployed", client_msg_id="d-7")
    assert first["ok"] and first["channel"] == "C1" and first["message"]["text"] == "Deployed"
    assert first["ts"] != again["ts"] and first["ts"] == first["message"]["ts"]
    assert outcomes(ledger_file, "slack") == ["created", "created"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"text": "x"}, "channel_not_found"),
        ({"channel": "C1"}, "no_text"),
        ({"channel": "C1", "text": "x" * 40_001}, "msg_too_long"),
        ({"channel": "C1", "blocks": "{not a list"}, "invalid_blocks"),
        ({"channel": "C1", "attachments": [{}] * 101}, "too_many_attachments"),
    ],
)
def test_slack_refuses_with_ok_false_and_its_error_code(
    url: str, ledger_file: str, args: dict[str, Any], error: str
) -> None:
    r = httpx.post(f"{url}/slack/api/chat.postMessage", json=args, headers=AUTH)
    assert r.status_code == 200 and r.json() == {"ok": False, "error": error}
    assert outcomes(ledger_file, "slack") == []


def test_slack_reads_forms_and_refuses_bad_json_and_a_missing_token(url: str, ledger_file: str) -> None:
    form = httpx.post(
        f"{url}/slack/api/chat.postMessage", data={"token": "xoxb", "channel": "C2", "text": "hi"}
    )
    assert form.json()["ok"] and form.json()["channel"] == "C2"
    json_headers = {**AUTH, "Content-Type": "application/json"}
    for raw, error in ((b"{oops", "invalid_json"), (b"[1]", "json_not_object")):
        r = httpx.post(f"{url}/slack/api/chat.postMessage", content=raw, headers=json_headers)
        assert r.json() == {"ok": False, "error": error}
    unauthenticated = httpx.post(f"{url}/slack/api/chat.postMessage", json={"channel": "C2", "text": "hi"})
    assert unauthenticated.json() == {"ok": False, "error": "not_authed"}
    assert outcomes(ledger_file, "slack") == ["created"]


def test_slack_history_lists_a_channels_posts_newest_first_unrecorded(url: str, ledger_file: str) -> None:
    post(url, channel="C1", text="one")
    post(url, channel="C2", text="elsewhere")
    post(url, channel="C1", text="two")
    history = httpx.get(f"{url}/slack/api/conversations.history?channel=C1", headers=AUTH).json()
    assert history["ok"] and [m["text"] for m in history["messages"]] == ["two", "one"]
    assert len(outcomes(ledger_file, "slack")) == 3


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
def test_slack_sdk_posts_twice_when_called_twice_and_raises_slacks_errors(url: str, ledger_file: str) -> None:
    slack_sdk = pytest.importorskip("slack_sdk")
    from slack_sdk.errors import SlackApiError

    client = slack_sdk.WebClient(token="xoxb-test", base_url=f"{url}/slack/api/")
    first = client.chat_postMessage(
        channel="C1", text="Deployed", metadata={"event_type": "deploy", "event_payload": {"id": "7"}}
    )
    client.chat_postMessage(channel="C1", text="Deployed")
    with pytest.raises(SlackApiError) as refused:
        client.chat_postMessage(channel="C1")
    assert refused.value.response["error"] == "no_text"
    history = client.conversations_history(channel="C1", include_all_metadata=True)
    assert history["messages"][-1]["ts"] == first["ts"]
    assert history["messages"][-1]["metadata"]["event_payload"] == {"id": "7"}
    assert outcomes(ledger_file, "slack") == ["created", "created"]


SMS = {"To": "+15550001111", "From": "+15550002222", "Body": "Your code is 7"}


def sms(url: str, account: str = ACCOUNT, **form: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/twilio/2010-04-01/Accounts/{account}/Messages.json",
        data={**SMS, **form},
        headers={"I-Twilio-Idempotency-Token": "otp-7"},
    )


def test_twilio_sends_every_request_again_whatever_idempotency_token_it_carries(
    url: str, ledger_file: str
) -> None:
    first, again = sms(url), sms(url)
    assert first.status_code == again.status_code == 201
    assert first.json()["sid"].startswith("SM") and len(first.json()["sid"]) == 34
    assert first.json()["sid"] != again.json()["sid"] and first.json()["status"] == "queued"
    assert outcomes(ledger_file, "twilio") == ["created", "created"]


@pytest.mark.parametrize(
    ("form", "status", "code"),
    [
        ({"To": ""}, 400, 21604),
        ({"From": ""}, 400, 21603),
        ({"Body": ""}, 400, 21602),
        ({"Body": "x" * 1601}, 400, 21617),
        ({"To": "not a number"}, 400, 21211),
    ],
)
def test_twilio_refuses_with_its_error_code_and_sends_nothing(
    url: str, ledger_file: str, form: dict[str, str], status: int, code: int
) -> None:
    r = sms(url, **form)
    assert r.status_code == status and r.json()["code"] == code
    assert r.json()["more_info"].endswith(str(code)) and r.json()["status"] == status
    assert sms(url, account="ACnope").json()["code"] == 20404
    assert outcomes(ledger_file, "twilio") == []


def test_twilio_accepts_a_messaging_service_or_media_instead(url: str, ledger_file: str) -> None:
    assert sms(url, From="", MessagingServiceSid="MG" + "a" * 32).status_code == 201
    assert sms(url, Body="", MediaUrl="https://example.com/a.png").json()["num_media"] == "1"
    assert sms(url, To="whatsapp:+15550001111").status_code == 201


def test_the_twilio_sdk_sends_twice_when_called_twice_and_lists_what_it_sent(
    url: str, ledger_file: str
) -> None:
    rest = pytest.importorskip("twilio.rest")
    from twilio.base.exceptions import TwilioRestException

    client = rest.Client(ACCOUNT, "auth-token")
    client.api.base_url = f"{url}/twilio"
    first = client.messages.create(to="+15550001111", from_="+15550002222", body="Code 7")
    client.messages.create(to="+15550001111", from_="+15550002222", body="Code 7")
    assert client.messages(first.sid).fetch().body == "Code 7"
    assert [m.sid for m in client.messages.list(to="+15550001111")][-1] == first.sid
    with pytest.raises(TwilioRestException) as refused:
        client.messages.create(to="+15550001111", from_="+15550002222")
    assert refused.value.code == 21602 and refused.value.status == 400
    assert outcomes(ledger_file, "twilio") == ["created", "created"]


def test_the_message_providers_are_irreversible_so_a_resend_is_diagnosed_as_such() -> None:
    from killdrill.verdict.diagnosis import _irreversible

    assert _irreversible("slack") and _irreversible("twilio") and _irreversible("postmark")
    assert not _irreversible("sendgrid")  # no search the fake serves: the plain unkeyed class


def test_slack_reads_metadata_from_a_form_as_json_and_refuses_one_that_is_not_an_object(
    url: str, ledger_file: str
) -> None:
    form = {
        "token": "x",
        "channel": "C3",
        "text": "hi",
        "metadata": '{"event_type": "e", "event_payload": {}}',
    }
    assert httpx.post(f"{url}/slack/api/chat.postMessage", data=form).json()["ok"]
    history = httpx.get(
        f"{url}/slack/api/conversations.history?channel=C3&include_all_metadata=true", headers=AUTH
    ).json()
    assert history["messages"][0]["metadata"] == {"event_type": "e", "event_payload": {}}
    for bad in ("{oops", "[1]"):
        r = httpx.post(f"{url}/slack/api/chat.postMessage", data={**form, "metadata": bad})
        assert r.json() == {"ok": False, "error": "invalid_metadata_format"}
    assert outcomes(ledger_file, "slack") == ["created"]


def test_slack_sdk_posts_again_by_itself_when_the_answer_is_lost(url: str, ledger_file: str) -> None:
    slack_sdk = pytest.importorskip("slack_sdk")

    Ledger(ledger_file, THREAD).configure("slack", drop_first=1)  # Slack posted, the connection broke
    client = slack_sdk.WebClient(token="xoxb-test", base_url=f"{url}/slack/api/")
    client.chat_postMessage(channel="C1", text="Deployed")  # its default retry handler resends
    assert outcomes(ledger_file, "slack") == ["created", "created"]
    Ledger(ledger_file, THREAD).configure("slack", drop_first=1)
    without_retries = slack_sdk.WebClient(token="xoxb-test", base_url=f"{url}/slack/api/", retry_handlers=[])
    with pytest.raises(ConnectionError):  # the caller hears the loss and can reconcile
        without_retries.chat_postMessage(channel="C1", text="Deployed")
    assert outcomes(ledger_file, "slack") == ["created", "created", "created"]
