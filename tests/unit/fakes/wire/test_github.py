"""GitHub's issues and comments, which take no idempotency key: every accepted create is a new
issue or comment; what GitHub refuses is its own 4xx shape; PyGithub drives it when installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from killdrill.errors import UsageError  # noqa: E402
from killdrill.fakes.existing import load_existing  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes  # noqa: E402


@pytest.fixture
def url(ledger_file: str) -> Iterator[str]:
    with FakesServer(ledger_file, thread=THREAD) as srv:
        yield f"{srv.url}/github"


def create(url: str, repo: str = "acme/shop", **body: Any) -> httpx.Response:
    return httpx.post(f"{url}/repos/{repo}/issues", json={"title": "Refund failed", **body})


def test_every_create_is_a_new_issue_numbered_per_repository(url: str, ledger_file: str) -> None:
    first, again, other = create(url), create(url), create(url, "acme/web")
    assert first.status_code == 201 and [r.json()["number"] for r in (first, again, other)] == [1, 2, 1]
    assert first.json()["url"].endswith("/github/repos/acme/shop/issues/1")
    assert first.json()["state"] == "open" and first.json()["title"] == "Refund failed"
    assert outcomes(ledger_file, "github") == ["created"] * 3


def test_every_comment_is_a_new_comment_on_an_issue_that_exists(url: str, ledger_file: str) -> None:
    create(url)
    one = httpx.post(f"{url}/repos/acme/shop/issues/1/comments", json={"body": "Retrying"})
    two = httpx.post(f"{url}/repos/acme/shop/issues/1/comments", json={"body": "Retrying"})
    assert one.status_code == 201 and one.json()["id"] != two.json()["id"]
    assert httpx.get(f"{url}/repos/acme/shop/issues/1").json()["comments"] == 2
    missing = httpx.post(f"{url}/repos/acme/shop/issues/9/comments", json={"body": "x"})
    assert missing.status_code == 404 and missing.json()["message"] == "Not Found"
    assert [c.op for c in Ledger(ledger_file, THREAD).calls("github")] == [
        "create_issue",
        "comment",
        "comment",
    ]


@pytest.mark.parametrize(
    ("raw", "status", "error"),
    [
        (b"{oops", 400, None),
        (b'{"body": "no title"}', 422, {"resource": "Issue", "code": "missing_field", "field": "title"}),
        (
            b'{"title": "t", "labels": "bug"}',
            422,
            {"resource": "Issue", "code": "invalid", "field": "labels"},
        ),
    ],
)
def test_github_refuses_with_its_error_shape_and_creates_nothing(
    url: str, ledger_file: str, raw: bytes, status: int, error: dict[str, str] | None
) -> None:
    r = httpx.post(f"{url}/repos/acme/shop/issues", content=raw)
    assert r.status_code == status and r.json()["message"] and r.json()["documentation_url"]
    assert r.json().get("errors") == ([error] if error else None)
    assert outcomes(ledger_file, "github") == []


def test_the_issue_list_filters_by_label_and_state_newest_first(url: str) -> None:
    create(url, labels=["bug"])
    create(url, title="Other")
    assert [i["number"] for i in httpx.get(f"{url}/repos/acme/shop/issues").json()] == [2, 1]
    assert [i["number"] for i in httpx.get(f"{url}/repos/acme/shop/issues?labels=bug").json()] == [1]
    assert httpx.get(f"{url}/repos/acme/shop/issues?state=closed").json() == []


def test_an_issue_declared_existing_takes_comments_and_its_number(
    url: str, ledger_file: str, tmp_path: Path
) -> None:
    path = tmp_path / "existing.json"
    path.write_text('{"github": {"issues": [{"repo": "acme/shop", "number": 1, "title": "Old bug"}]}}')
    load_existing(str(path)).plant(Ledger(ledger_file, THREAD))
    assert httpx.post(f"{url}/repos/acme/shop/issues/1/comments", json={"body": "Fixed"}).status_code == 201
    assert create(url).json()["number"] == 2
    assert outcomes(ledger_file, "github") == ["created", "created"]
    path.write_text('{"github": {"issues": [{"repo": "acme", "number": 1, "title": "t"}]}}')
    with pytest.raises(UsageError, match=r"github\.issues"):
        load_existing(str(path))


def test_pygithub_creates_twice_when_called_twice(url: str, ledger_file: str) -> None:
    github = pytest.importorskip("github")

    client = github.Github(
        base_url=url,
        auth=github.Auth.Token("ghp_test"),
        retry=None,
        seconds_between_requests=0,
        seconds_between_writes=0,
    )
    repo = client.get_repo("acme/shop")
    issue = repo.create_issue(title="Refund failed", body="order o-7", labels=["bug"])
    repo.create_issue(title="Refund failed", body="order o-7", labels=["bug"])
    issue.create_comment("Retrying the refund")
    assert [i.number for i in repo.get_issues(state="all")] == [2, 1]
    assert repo.get_issue(1).get_comments()[0].body == "Retrying the refund"
    with pytest.raises(github.GithubException) as refused:
        repo.get_issue(9)
    assert refused.value.status == 404
    assert outcomes(ledger_file, "github") == ["created"] * 3


def test_pygithub_creates_again_by_itself_when_the_answer_is_lost(url: str, ledger_file: str) -> None:
    github = pytest.importorskip("github")

    def create_issue(**retry: Any) -> None:
        client = github.Github(
            base_url=url,
            auth=github.Auth.Token("t"),
            seconds_between_requests=0,
            seconds_between_writes=0,
            **retry,
        )
        client.get_repo("acme/shop").create_issue(title="Refund failed")

    Ledger(ledger_file, THREAD).configure("github", drop_first=1)  # GitHub created it, the answer was lost
    create_issue()  # PyGithub's default retry sends the create again
    assert outcomes(ledger_file, "github") == ["created", "created"]
    Ledger(ledger_file, THREAD).configure("github", drop_first=1)
    with pytest.raises(OSError):  # retry=None: the caller hears the loss (requests' ConnectionError)
        create_issue(retry=None)
    assert outcomes(ledger_file, "github") == ["created"] * 3
