"""SendGrid's v3 Mail Send API, as its reference describes it (docs.sendgrid.com/api-reference/
mail-send/mail-send).

Base URL ``$KILLDRILL_FAKES_URL/sendgrid`` (the SDK's ``SendGridAPIClient(key, host=url +
"/sendgrid")``): ``POST /v3/mail/send`` (JSON; recorded as ``sendgrid.send``, answered ``202``
with an empty body and the ``X-Message-Id`` header).  The rules, one test each in
``tests/unit/fakes/wire/test_mail_apis.py`` (the ``sendgrid`` SDK's ``client.send`` among them):

- SendGrid takes no idempotency key: every accepted request is an email, so a request sent again
  after a lost answer (a kill, a timeout) is a second email (``irreversible``; an
  ``Idempotency-Key`` header is ignored);
- a body SendGrid refuses is its 400 ``{"errors": [{"message", "field", "help"}]}`` and nothing is
  sent: not JSON, no ``personalizations`` (1 to 1000, each with a ``to``), no ``from.email``, no
  ``subject`` (top level or in every personalization) or no ``content`` (both may come from a
  ``template_id``).

Assumed (not in the documents): the wording of each message; the ``X-Message-Id`` is the fake's
``sg_N``.  Not served: the Email Activity search (reconcile by your own record of what was sent).
"""

from __future__ import annotations

import re
from typing import Any

from killdrill.fakes import Answer, Operation
from killdrill.fakes.httpguard import NO_BODY
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, creates, route
from killdrill.providers import ProviderSpec, register

__all__ = ["MAX_PERSONALIZATIONS", "PROVIDER"]

PROVIDER = register(ProviderSpec("sendgrid", (Operation("send"),)))
MAX_PERSONALIZATIONS = 1000
_HELP = "http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html#message."


def _error(status: int, message: str, field: str | None = None) -> Reply:
    return status, {"errors": [{"message": message, "field": field, "help": _HELP + (field or "")}]}, {}


_MESSAGES = {
    "personalizations": "The personalizations field is required and must have at least one personalization.",
    "personalizations.0.to": "The to array is required for all personalization objects, and must have at "
    "least one email object with a valid email address.",
    "from": "The from object must be provided for every email send. It is an object that requires the email "
    "parameter, but may also contain a name parameter.",
    "subject": "The subject is required. You can get around this requirement if you use a template with a "
    "subject defined or if every personalization has a subject defined.",
    "content": "Unless a valid template_id is provided, the content parameter is required. There must be at "
    "least one defined content block.",
}


def _refused_field(body: dict[str, Any]) -> str | None:
    """The field SendGrid names when it refuses this mail, or None when it would send it."""
    people = body.get("personalizations")
    if not isinstance(people, list) or not people or not all(isinstance(p, dict) for p in people):
        return "personalizations"
    if not all(isinstance(p.get("to"), list) and p["to"] for p in people):
        return "personalizations.0.to"
    sender = body.get("from")
    if not isinstance(sender, dict) or not isinstance(sender.get("email"), str) or not sender["email"]:
        return "from"
    templated = bool(body.get("template_id"))
    if not templated and not body.get("subject") and not all(p.get("subject") for p in people):
        return "subject"
    content = body.get("content")
    if not templated and not (isinstance(content, list) and content):
        return "content"
    return None


def _render(answer: Answer) -> Reply:
    err = answer.error
    if err is None:
        return 202, NO_BODY, {"X-Message-Id": answer.body["id"]}
    return _error(err.status, err.message)


@route(r"/sendgrid/v3/mail/send", "POST")
def send(ex: Exchange, _m: re.Match[str]) -> None:
    try:
        body = ex.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        ex.reply(*_error(400, "Bad Request"))
        return
    field = _refused_field(body)
    if field is None and len(body["personalizations"]) > MAX_PERSONALIZATIONS:
        message = f"The personalizations field may not have more than {MAX_PERSONALIZATIONS} items."
        ex.reply(*_error(400, message, "personalizations"))
        return
    if field is not None:
        ex.reply(*_error(400, _MESSAGES[field], field))
        return
    perform = creates("sendgrid", "sg", {**body, "object": "mail"})
    ex.finish(ex.execute(FakeRequest("sendgrid", "send", None, body, perform)), _render)
