"""Twilio's Programmable Messaging ``Messages`` resource, as its reference describes it
(twilio.com/docs/messaging/api/message-resource, /docs/api/errors).

Base URL ``$KILLDRILL_FAKES_URL/twilio`` (the ``twilio`` SDK's ``client.api.base_url = url +
"/twilio"``): ``POST /2010-04-01/Accounts/{AccountSid}/Messages.json`` (form-encoded; recorded as
``twilio.send``, answered 201 with the Message resource, ``sid`` ``SM...``, ``status`` ``queued``),
``GET .../Messages/{Sid}.json`` and ``GET .../Messages.json`` (filtered by ``To`` and ``From``,
newest first: the read a sender reconciles with after a crash; unrecorded).  The rules, one test
each in ``tests/unit/fakes/wire/test_chat_apis.py`` (the ``twilio`` SDK among them):

- the Messages API takes no idempotency key: every accepted request is an SMS, and one sent again
  after a lost answer is a second SMS (``irreversible``).  ``I-Twilio-Idempotency-Token`` is a
  header Twilio *sends* on its webhooks (the same value on a retried delivery, so a receiver can
  dedupe them); the Messages API does not honour it on a request, so the fake ignores it there
  (our reading: the documents name it only on webhooks; the SDK's ``messages.create`` takes no key);
- errors are ``{"code", "message", "more_info", "status"}``: no ``To`` 400 21604, no ``From``
  or ``MessagingServiceSid`` 21603, no ``Body``/``MediaUrl``/``ContentSid`` 21602, a body over
  1,600 characters 21617, a ``To`` that is not a phone number (E.164) or a channel address
  (``whatsapp:``, ...) 21211, an account SID not of the form ``AC`` + 32 hex 404 20404; nothing
  sent.

Where it differs: any credentials and any account SID of the right form are accepted; a message
stays ``queued`` (no status callbacks, no price).
"""

from __future__ import annotations

import email.utils
import re
import urllib.parse
from typing import Any

from killdrill.fakes import Answer, Operation
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, route
from killdrill.ledger import Tx
from killdrill.providers import ProviderSpec, register

__all__ = ["MAX_BODY", "PROVIDER"]

PROVIDER = register(ProviderSpec("twilio", (Operation("send"), Operation("lookup", read=True))))
MAX_BODY = 1600
_ACCOUNT = r"/twilio/2010-04-01/Accounts/(?P<account>[^/]+)"
_ADDRESS = re.compile(r"(\+[1-9][0-9]{6,14}|[a-z]+:.+)")


def _error(status: int, code: int, message: str) -> Reply:
    more = f"https://www.twilio.com/docs/errors/{code}"
    return status, {"code": code, "message": message, "more_info": more, "status": status}, {}


def _bad_account(account: str) -> Reply | None:
    if re.fullmatch(r"AC[0-9a-f]{32}", account):
        return None
    return _error(404, 20404, f"The requested resource /2010-04-01/Accounts/{account} was not found")


def _refusal(form: dict[str, list[str]]) -> Reply | None:
    one = {k: v[-1] for k, v in form.items()}
    if not one.get("To"):
        return _error(400, 21604, "A 'To' phone number is required.")
    if not one.get("From") and not one.get("MessagingServiceSid"):
        return _error(400, 21603, "A 'From' phone number is required.")
    if not one.get("Body") and not form.get("MediaUrl") and not one.get("ContentSid"):
        return _error(400, 21602, "Message body is required.")
    if len(one.get("Body", "")) > MAX_BODY:
        return _error(400, 21617, f"The concatenated message body exceeds the {MAX_BODY} character limit.")
    if not _ADDRESS.fullmatch(one["To"]):
        return _error(400, 21211, f"Invalid 'To' Phone Number: {one['To'][:40]}")
    return None


def _perform(account: str, one: dict[str, str], media: list[str]) -> Any:
    def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
        n = int(tx.next_id("twilio").rsplit("_", 1)[1])
        sid = f"SM{n:032x}"
        now = email.utils.formatdate(usegmt=True).replace("GMT", "+0000")
        uri = f"/2010-04-01/Accounts/{account}/Messages/{sid}.json"
        message = {
            "account_sid": account,
            "api_version": "2010-04-01",
            "body": one.get("Body", ""),
            "date_created": now,
            "date_sent": None,
            "date_updated": now,
            "direction": "outbound-api",
            "error_code": None,
            "error_message": None,
            "from": one.get("From"),
            "messaging_service_sid": one.get("MessagingServiceSid"),
            "num_media": str(len(media)),
            "num_segments": str(max(1, -(-len(one.get("Body", "")) // 153))),
            "price": None,
            "price_unit": "USD",
            "sid": sid,
            "status": "queued",
            "subresource_uris": {"media": uri.replace(".json", "/Media.json")},
            "to": one["To"],
            "uri": uri,
        }
        tx.put_effect("twilio", sid, message, ref=account)
        return sid, message

    return perform


def _render(answer: Answer) -> Reply:
    err = answer.error
    if err is None:
        return 201, answer.body, {}
    if err.status == 429:
        return _error(429, 20429, "Too Many Requests")
    return _error(err.status, 20500, "An internal server error has occurred")


@route(_ACCOUNT + r"/Messages\.json", "POST")
def send(ex: Exchange, m: re.Match[str]) -> None:
    account = m.group("account")
    refused = _bad_account(account)
    try:
        form = urllib.parse.parse_qs(ex.raw.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        form = {}
    refused = refused or _refusal(form)
    if refused is not None:
        ex.reply(*refused)
        return
    one = {k: v[-1] for k, v in form.items()}
    media = form.get("MediaUrl", [])
    payload: dict[str, Any] = {**one, "MediaUrl": media} if media else one
    request = FakeRequest("twilio", "send", None, payload, _perform(account, one, media))
    ex.finish(ex.execute(request), _render)


@route(_ACCOUNT + r"/Messages/(?P<sid>[A-Za-z0-9]+)\.json", "GET")
def fetch(ex: Exchange, m: re.Match[str]) -> None:
    message = ex.fakes().ledger.effect("twilio", m.group("sid"))
    if message is None or message["account_sid"] != m.group("account"):
        ex.reply(*_error(404, 20404, f"The requested resource {ex.path} was not found"))
        return
    ex.reply(200, message)


@route(_ACCOUNT + r"/Messages\.json", "GET")
def list_messages(ex: Exchange, m: re.Match[str]) -> None:
    account = m.group("account")
    refused = _bad_account(account)
    if refused is not None:
        ex.reply(*refused)
        return
    query = dict(urllib.parse.parse_qsl(ex.query))
    found = [
        msg
        for msg in ex.fakes().ledger.effects("twilio", ref=account)
        if msg["to"] == query.get("To", msg["to"]) and msg["from"] == query.get("From", msg["from"])
    ]
    found.reverse()
    size = int(query["PageSize"]) if query.get("PageSize", "").isdigit() else 50
    page = found[: max(1, min(size, 1000))]
    uri = f"/2010-04-01/Accounts/{account}/Messages.json"
    ex.reply(
        200,
        {
            "messages": page,
            "end": max(0, len(page) - 1),
            "first_page_uri": f"{uri}?PageSize={size}&Page=0",
            "next_page_uri": None,
            "page": 0,
            "page_size": size,
            "previous_page_uri": None,
            "start": 0,
            "uri": f"{uri}?PageSize={size}&Page=0",
        },
    )
