"""Resend's email API, as its idempotency documentation describes it (resend.com/docs/dashboard/
emails/idempotency-keys).

Base URL ``$KILLDRILL_FAKES_URL/resend`` (the SDK's ``resend.api_url``): ``POST /emails`` (JSON
``from``, ``to``, ``subject``, ``html`` or ``text``; recorded as ``resend.send``, answered
``{"id": ...}``) and ``GET /emails/{id}``.  The rules, one test each in
``tests/unit/fakes/wire/test_resend.py`` (the ``resend`` SDK's ``Emails.send`` among them):

- the key is the ``Idempotency-Key`` header, up to 256 characters (longer: 400
  ``invalid_idempotency_key``, nothing sent); kept 24 h on the harness clock;
- the same key and payload within that time answers the first response, no second email;
- the same key with another payload: 409 ``invalid_idempotent_request``; a key whose first
  request is still being sent: 409 ``concurrent_idempotent_requests``;
- without a key every request sends;
- a body without ``from``, ``to``, ``subject`` or content is a 422 ``missing_required_field``
  (not a JSON object: 422 ``validation_error``), nothing sent.

Errors are Resend's body ``{"statusCode", "name", "message"}``.  Assumed (not in the
documents): only a success is saved under its key (a failure is attempted again), and ids are
the fake's ``em_N``, not Resend's UUIDs.
"""

from __future__ import annotations

import re

from killdrill.fakes import Answer, FakeProviderError, KeyRules
from killdrill.fakes.wire import Exchange, FakeRequest, Reply, creates, route

__all__ = ["KEY_HEADER", "MAX_KEY_LENGTH", "RULES"]

KEY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 256


def _in_flight(key: str) -> FakeProviderError:
    return FakeProviderError(
        "Same idempotency key used while original request is still in progress.",
        status=409,
        code="concurrent_idempotent_requests",
    )


def _mismatch(key: str, state: object) -> FakeProviderError:
    return FakeProviderError(
        "Same idempotency key used with a different request payload.",
        status=409,
        code="invalid_idempotent_request",
    )


RULES = KeyRules(in_flight=_in_flight, mismatch=_mismatch, cache_errors=False)


def _error(status: int, name: str, message: str) -> Reply:
    return status, {"statusCode": status, "name": name, "message": message}, {}


def _render(answer: Answer) -> Reply:
    err = answer.error
    if err is None:
        return 200, {"id": answer.body["id"]}, {}
    return _error(err.status, err.code or "application_error", err.message)


@route(r"/resend/emails", "POST")
def send_email(ex: Exchange, _m: re.Match[str]) -> None:
    key = ex.header(KEY_HEADER)
    if key is not None and len(key) > MAX_KEY_LENGTH:
        ex.reply(*_error(400, "invalid_idempotency_key", f"The key must be 1-{MAX_KEY_LENGTH} characters."))
        return
    try:
        body = ex.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        ex.reply(*_error(422, "validation_error", "The body must be a JSON object."))
        return
    missing = [f for f in ("from", "to", "subject") if not body.get(f)]
    if not missing and not any(body.get(f) for f in ("html", "text", "react", "template")):
        missing = ["html or text"]
    if missing:
        ex.reply(*_error(422, "missing_required_field", f"Missing `{missing[0]}` field."))
        return
    email = {**body, "object": "email", "last_event": "sent"}
    perform = creates("resend", "em", email)
    ex.finish(ex.execute(FakeRequest("resend", "send", key, body, perform, RULES)), _render)


@route(r"/resend/emails/(?P<id>[A-Za-z0-9_-]+)", "GET")
def get_email(ex: Exchange, m: re.Match[str]) -> None:
    email = ex.fakes().ledger.effect("resend", m.group("id"))
    if email is None:
        ex.reply(*_error(404, "not_found", "Email not found"))
        return
    ex.reply(200, email)
