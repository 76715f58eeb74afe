"""Postmark's Email API, as its reference describes it (postmarkapp.com/developer/api/email-api,
/messages-api, /overview#error-codes).

Base URL ``$KILLDRILL_FAKES_URL/postmark`` (``postmarker``'s ``PostmarkClient(server_token=...,
root_api_url=url + "/postmark/")``): ``POST /email`` (one message, recorded as ``postmark.send``,
answered ``{"To", "SubmittedAt", "MessageID", "ErrorCode": 0, "Message": "OK"}``), ``POST
/email/batch`` (up to 500 messages, each its own ``postmark.send``; answered with one such result
a message, a refused one with its ``ErrorCode`` and nothing sent for it; ``during:postmark.send``
is announced once, after the whole batch) and ``GET
/messages/outbound`` (the outbound message search: ``count`` and ``offset`` required, filtered by
``recipient``, ``fromemail``, ``tag``, ``subject`` and ``metadata_NAME``; the read a sender
reconciles with after a crash, unrecorded).  The rules, one test each in
``tests/unit/fakes/wire/test_mail_apis.py`` (``postmarker`` among them):

- Postmark takes no idempotency key: every accepted message is an email; a message sent again
  after a lost answer is a second one (``irreversible``; an ``Idempotency-Key`` is ignored);
- errors are ``422 {"ErrorCode", "Message"}``: not JSON 402, no ``From`` or no recipient or no
  ``TextBody``/``HtmlBody`` 300, over 500 messages in a batch 410; nothing sent.

Assumed (not in the documents): the wording of the 300 messages and of a search without
``count``/``offset`` (a 422 300); ``MessageID`` is a UUID-shaped counter; a message is ``Sent``
at once; any server token is accepted.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any

from killdrill.fakes import Answer, Operation
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, route
from killdrill.ledger import Tx
from killdrill.providers import ProviderSpec, register

__all__ = ["MAX_BATCH", "PROVIDER"]

PROVIDER = register(ProviderSpec("postmark", (Operation("send"), Operation("lookup", read=True))))
MAX_BATCH = 500


def _error(code: int, message: str, status: int = 422) -> Reply:
    return status, {"ErrorCode": code, "Message": message}, {}


def _refusal(message: Any) -> str | None:
    """Why Postmark refuses this message (its ErrorCode 300 text), or None when it sends it."""
    if not isinstance(message, dict):
        return "Invalid email request: a message must be a JSON object."
    if not isinstance(message.get("From"), str) or not message["From"].strip():
        return "Invalid 'From' address: ''."
    if not any(isinstance(message.get(f), str) and message[f].strip() for f in ("To", "Cc", "Bcc")):
        return "Zero recipients specified"
    if not any(isinstance(message.get(f), str) and message[f] for f in ("TextBody", "HtmlBody")):
        return "Provide either email TextBody or HtmlBody or both."
    metadata = message.get("Metadata") or {}  # postmarker sends null when there is none
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        return "Invalid metadata: an object of text values."
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.0000000Z", time.gmtime())


def _perform(message: dict[str, Any]) -> Any:
    def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
        n = int(tx.next_id("pm").rsplit("_", 1)[1])
        message_id = f"00000000-0000-4000-8000-{n:012d}"
        recipients = [a.strip() for f in ("To", "Cc", "Bcc") for a in str(message.get(f) or "").split(",")]
        stored = {
            **message,
            "MessageID": message_id,
            "SubmittedAt": _now(),
            "Status": "Sent",
            "Recipients": [a for a in recipients if a],
        }
        tx.put_effect("postmark", message_id, stored)
        return message_id, stored

    return perform


def _result(answer: Answer) -> dict[str, Any]:
    err = answer.error
    if err is not None:
        return {"ErrorCode": 500 if err.status >= 500 else 300, "Message": err.message}
    body = answer.body
    return {
        "To": body.get("To"),
        "SubmittedAt": body["SubmittedAt"],
        "MessageID": body["MessageID"],
        "ErrorCode": 0,
        "Message": "OK",
    }


def _render(answer: Answer) -> Reply:
    result = _result(answer)
    if result["ErrorCode"]:
        return (answer.error.status if answer.error else 500), result, {}
    return 200, result, {}


def _body(ex: Exchange) -> tuple[bool, Any]:
    try:
        return True, ex.json()
    except ValueError:
        return False, None


def _send(ex: Exchange, message: dict[str, Any]) -> Answer:
    return ex.execute(FakeRequest("postmark", "send", None, message, _perform(message)))


@route(r"(?:/postmark)?/email", "POST")
def send_email(ex: Exchange, _m: re.Match[str]) -> None:
    ok, message = _body(ex)
    if not ok:
        ex.reply(*_error(402, "Received invalid JSON input."))
        return
    refused = _refusal(message)
    if refused is not None:
        ex.reply(*_error(300, refused))
        return
    ex.finish(_send(ex, message), _render)


@route(r"(?:/postmark)?/email/batch", "POST")
def send_batch(ex: Exchange, _m: re.Match[str]) -> None:
    ok, messages = _body(ex)
    if not ok or not isinstance(messages, list):
        ex.reply(*_error(402, "Received invalid JSON input."))
        return
    if len(messages) > MAX_BATCH:
        ex.reply(*_error(410, f"Too many batch messages: at most {MAX_BATCH}."))
        return
    results: list[dict[str, Any]] = []
    last: Answer | None = None
    for message in messages:
        refused = _refusal(message)
        if refused is not None:
            results.append({"ErrorCode": 300, "Message": refused})
            continue
        last = _send(ex, message)
        results.append(_result(last))
    if last is None:
        ex.reply(200, results)
        return
    ex.finish(last, lambda _answer: (200, results, {}))


@route(r"(?:/postmark)?/messages/outbound", "GET")
def search_outbound(ex: Exchange, _m: re.Match[str]) -> None:
    query = dict(urllib.parse.parse_qsl(ex.query))
    try:
        count, offset = int(query["count"]), int(query["offset"])
    except (KeyError, ValueError):
        ex.reply(*_error(300, "The 'count' and 'offset' parameters are required whole numbers."))
        return
    if not 0 < count <= MAX_BATCH or offset < 0:
        ex.reply(*_error(300, f"'count' must be 1-{MAX_BATCH} and 'offset' at least 0."))
        return
    found = [m for m in ex.fakes().ledger.effects("postmark") if _matches(m, query)]
    found.reverse()  # newest first, as Postmark lists them
    messages = [_summary(m) for m in found[offset : offset + count]]
    ex.reply(200, {"TotalCount": len(found), "Messages": messages})


def _matches(message: dict[str, Any], query: dict[str, str]) -> bool:
    """Whether the search's filters (``recipient``, ``fromemail``, ``tag``, ``subject``,
    ``metadata_NAME``) all hold for ``message``."""
    recipients = [str(a).lower() for a in message.get("Recipients", [])]
    metadata = message.get("Metadata") or {}
    for name, value in query.items():
        if name == "recipient" and value.lower() not in recipients:
            return False
        if name == "fromemail" and value.lower() not in str(message.get("From", "")).lower():
            return False
        if name in ("tag", "subject") and message.get(name.capitalize()) != value:
            return False
        if name.startswith("metadata_") and metadata.get(name[9:]) != value:
            return False
    return True


def _summary(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "MessageID": m["MessageID"],
        "Tag": m.get("Tag", ""),
        "To": [{"Email": a, "Name": None} for a in str(m.get("To") or "").split(",") if a.strip()],
        "Recipients": m["Recipients"],
        "ReceivedAt": m["SubmittedAt"],
        "From": m.get("From"),
        "Subject": m.get("Subject", ""),
        "Status": m["Status"],
        "Metadata": m.get("Metadata") or {},
        "MessageStream": m.get("MessageStream", "outbound"),
        "TrackOpens": bool(m.get("TrackOpens")),
        "Attachments": [],
    }
