"""GitHub's REST API for issues and their comments, as its reference describes it
(docs.github.com/rest/issues/issues, /rest/issues/comments, /rest/overview/troubleshooting).

Base URL ``$KILLDRILL_FAKES_URL/github`` (PyGithub's ``Github(base_url=url + "/github",
auth=...)``): ``POST /repos/{owner}/{repo}/issues`` (recorded as ``github.create_issue``, 201
with the issue, numbered per repository) and ``POST /repos/{owner}/{repo}/issues/{number}/
comments`` (``github.comment``, 201 with the comment); unrecorded reads: ``GET /repos/{owner}/
{repo}`` (every repository exists), ``GET .../issues`` (newest first, ``state``, ``labels``,
``creator`` filters: the read an agent reconciles with after a crash), ``GET .../issues/{number}``
and ``GET .../issues/{number}/comments``.  An issue that existed before the drill is declared
with ``--existing`` (``[[github.issues]] repo = "o/r"``, ``number``, ``title``).  The rules, one
test each in ``tests/unit/fakes/wire/test_github.py`` (PyGithub among them):

- GitHub takes no idempotency key: every accepted create is a new issue or comment, and one sent
  again after a lost answer is a second (``irreversible``);
- errors are ``{"message", "documentation_url", "status"}``: a body that is not JSON 400
  ``Problems parsing JSON``; an issue without ``title`` or a comment without ``body`` 422
  ``Validation Failed`` with ``errors: [{"resource", "code": "missing_field", "field"}]``
  (``labels``/``assignees`` not a list: ``code: invalid``); a comment on an issue that does not
  exist 404 ``Not Found``; nothing created.

Where it differs: any token (or none) is accepted and every repository exists; the author is
``killdrill-agent``; ``assignees`` and ``milestone`` are kept, not checked against the repository;
no ``Link`` pagination (one page of up to 100).
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

__all__ = ["PROVIDER", "issue_id"]

PROVIDER = register(
    ProviderSpec("github", (Operation("create_issue"), Operation("comment"), Operation("lookup", read=True)))
)
_REPO = r"/github/repos/(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)"
_DOCS = "https://docs.github.com/rest/issues"
_USER = {"login": "killdrill-agent", "id": 1, "type": "Bot", "site_admin": False}


def issue_id(repo: str, number: int) -> str:
    """The ledger id of an issue (also what ``--existing`` plants)."""
    return f"{repo}#{number}"


def _error(status: int, message: str, errors: list[dict[str, str]] | None = None) -> Reply:
    body: dict[str, Any] = {"message": message, "documentation_url": _DOCS, "status": str(status)}
    if errors:
        body["errors"] = errors
    return status, body, {}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _base(ex: Exchange) -> str:
    """The API root the caller used, for the resources' own URLs (PyGithub follows ``url``)."""
    secret = getattr(ex.handler, "secret", "")
    return f"http://{ex.header('Host') or '127.0.0.1'}/{secret}/github"


def _issue(ex: Exchange, stored: dict[str, Any]) -> dict[str, Any]:
    repo, number = stored["repo"], stored["number"]
    api = f"{_base(ex)}/repos/{repo}/issues/{number}"
    comments = ex.fakes().ledger.effects("github", ref=issue_id(repo, number))
    return {
        "id": stored.get("id_number", number),
        "node_id": f"I_kd{number}",
        "url": api,
        "repository_url": f"{_base(ex)}/repos/{repo}",
        "comments_url": api + "/comments",
        "html_url": f"https://github.com/{repo}/issues/{number}",
        "number": number,
        "state": stored.get("state", "open"),
        "title": stored["title"],
        "body": stored.get("body"),
        "user": _USER,
        "labels": [{"name": n if isinstance(n, str) else n["name"]} for n in _list(stored, "labels")],
        "assignee": None,
        "assignees": [{"login": a if isinstance(a, str) else a["name"]} for a in _list(stored, "assignees")],
        "milestone": None,
        "locked": False,
        "comments": len(comments),
        "created_at": stored.get("created_at", _now()),
        "updated_at": stored.get("created_at", _now()),
        "closed_at": None,
        "author_association": "OWNER",
    }


def _list(stored: dict[str, Any], field: str) -> list[Any]:
    values = stored.get(field)
    return [v for v in values if _named(v)] if isinstance(values, list) else []


def _comment(ex: Exchange, stored: dict[str, Any]) -> dict[str, Any]:
    repo, number = stored["repo"], stored["number"]
    return {
        "id": stored["id_number"],
        "node_id": f"IC_kd{stored['id_number']}",
        "url": f"{_base(ex)}/repos/{repo}/issues/comments/{stored['id_number']}",
        "html_url": f"https://github.com/{repo}/issues/{number}#issuecomment-{stored['id_number']}",
        "issue_url": f"{_base(ex)}/repos/{repo}/issues/{number}",
        "body": stored["body"],
        "user": _USER,
        "created_at": stored["created_at"],
        "updated_at": stored["created_at"],
        "author_association": "OWNER",
    }


def _json(ex: Exchange) -> tuple[bool, Any]:
    try:
        return True, ex.json()
    except ValueError:
        return False, None


def _named(value: Any) -> bool:
    """A label or assignee as GitHub takes one: its name, or an object with a ``name``."""
    return isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("name"), str))


def _invalid(body: Any, resource: str, required: str) -> Reply | None:
    if not isinstance(body, dict):
        return _error(400, "Problems parsing JSON")
    if not isinstance(body.get(required), (str, int)) or body[required] in ("", None):
        return _error(
            422, "Validation Failed", [{"resource": resource, "code": "missing_field", "field": required}]
        )
    for field in ("labels", "assignees"):
        if field in body and not (isinstance(body[field], list) and all(_named(v) for v in body[field])):
            return _error(
                422, "Validation Failed", [{"resource": resource, "code": "invalid", "field": field}]
            )
    return None


def _render(ex: Exchange, shape: Any) -> Any:
    def render(answer: Answer) -> Reply:
        err = answer.error
        if err is None:
            return 201, shape(ex, answer.body), {}
        if err.status == 429:
            return _error(429, "API rate limit exceeded")
        return _error(err.status, "Server Error")

    return render


@route(_REPO, "GET")
def get_repo(ex: Exchange, m: re.Match[str]) -> None:
    repo = m.group("repo")
    owner, name = repo.split("/")
    api = f"{_base(ex)}/repos/{repo}"
    ex.reply(
        200,
        {
            "id": 1,
            "name": name,
            "full_name": repo,
            "owner": {"login": owner, "type": "Organization"},
            "private": False,
            "url": api,
            "html_url": f"https://github.com/{repo}",
            "issues_url": api + "/issues{/number}",
            "has_issues": True,
        },
    )


@route(_REPO + r"/issues", "POST")
def create_issue(ex: Exchange, m: re.Match[str]) -> None:
    repo = m.group("repo")
    ok, body = _json(ex)
    refused = _invalid(body if ok else None, "Issue", "title")
    if refused is not None:
        ex.reply(*refused)
        return

    def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
        n = int(tx.next_id("gh_issue").rsplit("_", 1)[1])
        number = tx.counter(f"github.issues:{repo}", 1)
        while tx.get_effect("github", issue_id(repo, number)) is not None:  # a declared issue holds it
            number = tx.counter(f"github.issues:{repo}", 1)
        stored = {**body, "repo": repo, "number": number, "id_number": 1000 + n, "created_at": _now()}
        stored["title"] = str(body["title"])
        tx.put_effect("github", issue_id(repo, number), stored, ref=repo)
        return issue_id(repo, number), stored

    payload = {"repo": repo, **body}
    answer = ex.execute(FakeRequest("github", "create_issue", None, payload, perform))
    ex.finish(answer, _render(ex, _issue))


@route(_REPO + r"/issues/(?P<number>[0-9]+)/comments", "POST")
def comment(ex: Exchange, m: re.Match[str]) -> None:
    repo, number = m.group("repo"), int(m.group("number"))
    if ex.fakes().ledger.effect("github", issue_id(repo, number)) is None:
        ex.reply(*_error(404, "Not Found"))
        return
    ok, body = _json(ex)
    refused = _invalid(body if ok else None, "IssueComment", "body")
    if refused is not None:
        ex.reply(*refused)
        return

    def perform(tx: Tx) -> tuple[str, dict[str, Any]]:
        n = int(tx.next_id("gh_comment").rsplit("_", 1)[1])
        stored = {
            "repo": repo,
            "number": number,
            "body": str(body["body"]),
            "id_number": 5000 + n,
            "created_at": _now(),
        }
        tx.put_effect("github", f"comment_{n}", stored, ref=issue_id(repo, number))
        return f"comment_{n}", stored

    payload = {"repo": repo, "issue": number, "body": body["body"]}
    answer = ex.execute(FakeRequest("github", "comment", None, payload, perform))
    ex.finish(answer, _render(ex, _comment))


@route(_REPO + r"/issues", "GET")
def list_issues(ex: Exchange, m: re.Match[str]) -> None:
    query = dict(urllib.parse.parse_qsl(ex.query))
    state = query.get("state", "open")
    labels = {label for label in query.get("labels", "").split(",") if label}
    issues = [_issue(ex, i) for i in ex.fakes().ledger.effects("github", ref=m.group("repo"))]
    issues = [
        i
        for i in issues
        if state in ("all", i["state"])
        and labels <= {label["name"] for label in i["labels"]}
        and query.get("creator", i["user"]["login"]) == i["user"]["login"]
    ]
    issues.sort(key=lambda i: i["number"], reverse=True)
    ex.reply(200, issues[:100])


@route(_REPO + r"/issues/(?P<number>[0-9]+)", "GET")
def get_issue(ex: Exchange, m: re.Match[str]) -> None:
    stored = ex.fakes().ledger.effect("github", issue_id(m.group("repo"), int(m.group("number"))))
    if stored is None:
        ex.reply(*_error(404, "Not Found"))
        return
    ex.reply(200, _issue(ex, stored))


@route(_REPO + r"/issues/(?P<number>[0-9]+)/comments", "GET")
def list_comments(ex: Exchange, m: re.Match[str]) -> None:
    key = issue_id(m.group("repo"), int(m.group("number")))
    if ex.fakes().ledger.effect("github", key) is None:
        ex.reply(*_error(404, "Not Found"))
        return
    ex.reply(200, [_comment(ex, c) for c in ex.fakes().ledger.effects("github", ref=key)])
