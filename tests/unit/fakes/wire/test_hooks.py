"""The generic HTTP sink under ``/hooks/``, driven with ``httpx`` and ``requests``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
requests = pytest.importorskip("requests")

from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes, while_in_flight  # noqa: E402


def serve(ledger_file: str, **hooks: Any) -> FakesServer:
    return FakesServer(ledger_file, thread=THREAD, wire={"hooks": hooks} if hooks else None)


@pytest.fixture
def base(ledger_file: str) -> Iterator[str]:
    with serve(ledger_file) as srv:
        yield f"{srv.url}/hooks"


def test_records_method_path_json_body_and_key(base: str, ledger_file: str) -> None:
    r = httpx.put(f"{base}/orders/7?dry=0", json={"status": "shipped"}, headers={"Idempotency-Key": "k-7"})
    assert r.status_code == 200 and r.json()["id"].startswith("hk_")
    (call,) = Ledger(ledger_file, THREAD).calls("hooks")
    assert (call.op, call.key) == ("put", "k-7")
    assert call.payload == {"path": "/orders/7", "body": {"status": "shipped"}, "query": "dry=0"}


def test_any_method(base: str, ledger_file: str) -> None:
    for method in ("POST", "PUT", "PATCH", "DELETE"):  # GET is safe: see below
        assert requests.request(method, f"{base}/x", json={"m": method}).status_code == 200
    assert [c.op for c in Ledger(ledger_file, THREAD).calls("hooks")] == ["post", "put", "patch", "delete"]


def test_with_a_key_a_route_replays_the_stored_response(base: str, ledger_file: str) -> None:
    first = requests.post(f"{base}/tickets", json={"title": "refund"}, headers={"Idempotency-Key": "t-1"})
    again = requests.post(f"{base}/tickets", json={"title": "refund"}, headers={"Idempotency-Key": "t-1"})
    assert first.json()["id"] == again.json()["id"]
    assert (first.headers["Idempotent-Replayed"], again.headers["Idempotent-Replayed"]) == ("false", "true")
    assert outcomes(ledger_file, "hooks") == ["created", "replayed"]


def test_without_a_key_every_request_creates(base: str, ledger_file: str) -> None:
    ids = {httpx.post(f"{base}/tickets", json={"title": "refund"}).json()["id"] for _ in range(2)}
    assert len(ids) == 2
    assert outcomes(ledger_file, "hooks") == ["created", "created"]


def test_a_naive_route_creates_every_time_whatever_the_key(ledger_file: str) -> None:
    with serve(ledger_file, routes={"/notify*": "naive"}) as srv:
        for _ in range(2):
            httpx.post(
                f"{srv.url}/hooks/notify/slack", json={"text": "paid"}, headers={"Idempotency-Key": "n"}
            )
        httpx.post(f"{srv.url}/hooks/tickets", json={"t": 1}, headers={"Idempotency-Key": "t"})
        httpx.post(f"{srv.url}/hooks/tickets", json={"t": 1}, headers={"Idempotency-Key": "t"})
    calls = Ledger(ledger_file, THREAD).calls("hooks")
    assert [(c.payload["path"], c.key, c.outcome) for c in calls] == [
        ("/notify/slack", "n", "created"),
        ("/notify/slack", "n", "created"),  # the key is recorded: the verdict sees it was stable
        ("/tickets", "t", "created"),
        ("/tickets", "t", "replayed"),
    ]


def test_the_key_header_is_configurable(ledger_file: str) -> None:
    with serve(ledger_file, key_header="X-Request-Id") as srv:
        for _ in range(2):
            httpx.post(f"{srv.url}/hooks/tickets", json={"t": 1}, headers={"X-Request-Id": "r-1"})
    assert [(c.key, c.outcome) for c in Ledger(ledger_file, THREAD).calls("hooks")] == [
        ("r-1", "created"),
        ("r-1", "replayed"),
    ]


def test_a_keyed_route_refuses_another_body_under_the_same_key(base: str, ledger_file: str) -> None:
    httpx.post(f"{base}/tickets", json={"title": "a"}, headers={"Idempotency-Key": "same"})
    r = httpx.post(f"{base}/tickets", json={"title": "b"}, headers={"Idempotency-Key": "same"})
    assert r.status_code == 400
    assert outcomes(ledger_file, "hooks") == ["created", "rejected"]


def test_a_keyed_route_answers_409_while_the_key_is_in_flight(base: str, ledger_file: str) -> None:
    def post() -> httpx.Response:
        return httpx.post(f"{base}/tickets", json={"title": "a"}, headers={"Idempotency-Key": "slow"})

    assert while_in_flight(ledger_file, "hooks", post, post).status_code == 409


def test_a_body_that_is_not_json_is_recorded_as_text(base: str, ledger_file: str) -> None:
    requests.post(f"{base}/form", data={"a": "1"})
    assert Ledger(ledger_file, THREAD).calls("hooks")[0].payload["body"] == "a=1"


def test_a_bad_route_mode_is_a_one_line_error(ledger_file: str) -> None:
    with serve(ledger_file, routes={"/x": "sometimes"}) as srv:
        r = httpx.post(f"{srv.url}/hooks/x", json={}, headers={"Idempotency-Key": "k"})
    assert r.status_code == 500 and "keyed or naive" in r.json()["error"]["message"]


def test_get_is_not_an_effect_and_reads_a_created_resource(base: str, ledger_file: str) -> None:
    created = httpx.post(f"{base}/tickets", json={"title": "refund"}, headers={"Idempotency-Key": "g"}).json()
    for _ in range(2):  # a resumed agent polls again: not a duplicate
        r = httpx.get(f"{base}/tickets/{created['id']}")
        assert r.status_code == 200 and r.json()["body"] == {"title": "refund"}
    assert httpx.get(f"{base}/tickets/hk_9999").status_code == 404
    assert [c.op for c in Ledger(ledger_file, THREAD).calls("hooks")] == ["post"]


def test_a_key_longer_than_255_characters_is_refused_and_nothing_recorded(
    base: str, ledger_file: str
) -> None:
    r = httpx.post(f"{base}/tickets", json={"title": "x"}, headers={"Idempotency-Key": "k" * 60_000})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert (
        httpx.post(f"{base}/tickets", json={"title": "x"}, headers={"Idempotency-Key": "k" * 255}).status_code
        == 200
    )
    assert outcomes(ledger_file, "hooks") == ["created"]
