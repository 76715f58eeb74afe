"""Slack's Web API ``chat.postMessage``, as its reference describes it (api.slack.com/methods/
chat.postMessage, /methods/conversations.history, /web#responses).

Base URL ``$KILLDRILL_FAKES_URL/slack/api/`` (``slack_sdk``'s ``WebClient(token, base_url=url +
"/slack/api/")``): ``POST /chat.postMessage`` (JSON or form-encoded; recorded as
``slack.post``, answered ``{"ok": true, "channel", "ts", "message"}``) and ``conversations.history``
(GET or POST, ``channel``, ``limit`` and ``include_all_metadata``: the channel's messages, newest
first, their ``metadata`` only when asked, unrecorded: the read a poster reconciles with after a
crash).  The rules, one test each in
``tests/unit/fakes/wire/test_chat_apis.py`` (``slack_sdk`` among them):

- Slack takes no idempotency key for ``chat.postMessage``: every accepted call is a message, and
  one posted again after a lost answer is a second message (``irreversible``).  ``client_msg_id``
  is a field of messages Slack's own clients post; the method does not document it, so the fake
  keeps it in the message and dedupes nothing by it (*our reading of the documents*);
- errors are HTTP 200 ``{"ok": false, "error": CODE}``: no token ``not_authed``, no channel
  ``channel_not_found``, none of ``text``/``blocks``/``attachments`` ``no_text``, text over
  40,000 characters ``msg_too_long``, over 100 attachments ``too_many_attachments``, ``blocks``
  that are not a list ``invalid_blocks``, ``metadata`` that is not an object
  ``invalid_metadata_format``, a body that is not JSON ``invalid_json`` (not an object
  ``json_not_object``); nothing posted.

Where it differs: every channel exists and is answered as given (Slack answers a ``#name`` with
the channel's id); any token is accepted; ``ts`` is a counter, not the clock; ``thread_ts`` is
kept, not checked.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from killdrill.fakes import Answer, Operation
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, route
from killdrill.ledger import Tx
from killdrill.providers import ProviderSpec, register

__all__ = ["MAX_TEXT", "PROVIDER"]

PROVIDER = register(ProviderSpec("slack", (Operation("post"), Operation("lookup", read=True))))
MAX_TEXT = 40_000
MAX_ATTACHMENTS = 100


class _Refused(Exception):
    """A Slack error code: answered ``{"ok": false, "error": code}``."""


def _args(ex: Exchange) -> dict[str, Any]:
    """The method's arguments, from the query, a form or a JSON body, as Slack reads them."""
    args: dict[str, Any] = dict(urllib.parse.parse_qsl(ex.query))
    kind = (ex.header("Content-Type") or "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            body = ex.json()
        except ValueError:
            raise _Refused("invalid_json") from None
        if body is not None and not isinstance(body, dict):
            raise _Refused("json_not_object")
        args.update(body or {})
    elif ex.raw:
        try:
            args.update(urllib.parse.parse_qsl(ex.raw.decode("utf-8"), strict_parsing=True))
        except (UnicodeDecodeError, ValueError):
            raise _Refused("invalid_form_data") from None
    auth = ex.header("Authorization") or ""
    if not auth.lower().startswith("bearer ") and not args.pop("token", None):
        raise _Refused("not_authed")
    return args


def _decoded(value: Any, what: str) -> Any:
    """A list argument, given as a list (JSON) or a JSON string (a form)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _Refused(f"invalid_{what}") from None
    if not isinstance(value, list):
        raise _Refused(f"invalid_{what}")
    return value


def _message(args: dict[str, Any]) -> dict[str, Any]:
    channel = args.get("channel")
    if not isinstance(channel, str) or not channel.strip():
        raise _Refused("channel_not_found")
    text = args.get("text")
    blocks = _decoded(args["blocks"], "blocks") if args.get("blocks") not in (None, "") else None
    attachments = _decoded(args["attachments"], "attachments") if args.get("attachments") else None
    if not text and not blocks and not attachments:
        raise _Refused("no_text")
    if text is not None and len(str(text)) > MAX_TEXT:
        raise _Refused("msg_too_long")
    if attachments is not None and len(attachments) > MAX_ATTACHMENTS:
        raise _Refused("too_many_attachments")
    metadata = args.get("metadata")
    if isinstance(metadata, str) and metadata:  # a form carries it as JSON text
        try:
            metadata = json.loads(metadata)
        except ValueError:
            raise _Refused("invalid_metadata_format") from None
    if metadata not in (None, "") and not isinstance(metadata, dict):
        raise _Refused("invalid_metadata_format")
    return {**args, "channel": channel, "blocks": blocks, "attachments": attachments, "metadata": metadata}


def _perform(message: dict[str, Any]) -> Any:
    def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
        n = int(tx.next_id("slack").rsplit("_", 1)[1])
        ts = f"{1_700_000_000 + n}.{n % 1_000_000:06d}"
        posted = {
            "type": "message",
            "subtype": "bot_message",
            "text": str(message.get("text") or ""),
            "ts": ts,
            "bot_id": "B0KILLDRILL",
            **{
                k: message[k]
                for k in ("blocks", "attachments", "thread_ts", "metadata", "client_msg_id")
                if message.get(k) is not None
            },
        }
        stored = {"channel": message["channel"], "message": posted}
        tx.put_effect("slack", f"{message['channel']}/{ts}", stored, ref=message["channel"])
        return ts, stored

    return perform


def _render(answer: Answer) -> Reply:
    err = answer.error
    if err is not None:
        if err.status == 429:
            return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}
        return (
            err.status,
            {"ok": False, "error": "internal_error" if err.status >= 500 else "fatal_error"},
            {},
        )
    body = answer.body
    return (
        200,
        {"ok": True, "channel": body["channel"], "ts": body["message"]["ts"], "message": body["message"]},
        {},
    )


@route(r"/slack/api/chat\.postMessage", "POST")
def post_message(ex: Exchange, _m: re.Match[str]) -> None:
    try:
        message = _message(_args(ex))
    except _Refused as refused:
        ex.reply(200, {"ok": False, "error": str(refused)})
        return
    payload = {k: v for k, v in message.items() if v is not None}
    ex.finish(ex.execute(FakeRequest("slack", "post", None, payload, _perform(message))), _render)


@route(r"/slack/api/conversations\.history", "GET POST")
def history(ex: Exchange, _m: re.Match[str]) -> None:
    try:
        args = _args(ex)
        channel = args.get("channel")
        if not isinstance(channel, str) or not channel:
            raise _Refused("channel_not_found")
        limit = int(args.get("limit") or 100)
    except _Refused as refused:
        ex.reply(200, {"ok": False, "error": str(refused)})
        return
    except ValueError:
        ex.reply(200, {"ok": False, "error": "invalid_limit"})
        return
    messages = [m["message"] for m in ex.fakes().ledger.effects("slack", ref=channel)]
    if str(args.get("include_all_metadata", "")).lower() not in ("true", "1"):  # Slack's default
        messages = [{k: v for k, v in m.items() if k != "metadata"} for m in messages]
    messages.reverse()
    page = messages[: max(1, min(limit, 999))]
    ex.reply(200, {"ok": True, "messages": page, "has_more": len(messages) > len(page), "pin_count": 0})
