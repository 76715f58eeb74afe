"""The real ``stripe`` SDK against the HTTP fake: a stable key replays, the automatic one does not."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

stripe = pytest.importorskip("stripe")

from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from killdrill.records import CONFLICT, CREATED, REPLAYED  # noqa: E402

PARAMS = {"amount": 2500, "currency": "usd", "metadata": {"account": "acct_7", "cycle": "2026-11"}}


def client(srv: FakesServer, retries: int = 0) -> stripe.StripeClient:
    return stripe.StripeClient("sk_test_x", base_addresses={"api": srv.url}, max_network_retries=retries)


def charges(ledger_file: str) -> list[tuple[str | None, str]]:
    return [(c.key, c.outcome) for c in Ledger(ledger_file, "t").calls("payments", "charge")]


def test_explicit_stable_key_replays(server: FakesServer, ledger_file: str) -> None:
    sdk = client(server)
    opts = {"idempotency_key": "settle:acct_7:2026-11"}
    first = sdk.v1.payment_intents.create(params=PARAMS, options=opts)
    second = sdk.v1.payment_intents.create(params=PARAMS, options=opts)
    assert first.id == second.id and first.object == "payment_intent" and first.amount == 2500
    assert first.metadata["account"] == "acct_7"
    assert second.last_response.headers["Idempotent-Replayed"] == "true"
    assert charges(ledger_file) == [(opts["idempotency_key"], CREATED), (opts["idempotency_key"], REPLAYED)]
    assert sdk.v1.payment_intents.retrieve(first.id).status == "succeeded"


def test_automatic_key_charges_twice_across_process_runs(server: FakesServer, ledger_file: str) -> None:
    # Each run stands for one attempt of an agent: the SDK makes a new key per call, so a
    # restarted process (after a kill) charges again with a key the provider has never seen.
    code = textwrap.dedent(
        f"""
        import stripe
        url = {server.url!r}
        sdk = stripe.StripeClient("sk_test_x", base_addresses={{"api": url}}, max_network_retries=0)
        print(sdk.v1.payment_intents.create(params={PARAMS!r}).id)
        """
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    ids = [r.communicate(timeout=60)[0].strip() for r in runs]
    assert [r.returncode for r in runs] == [0, 0]
    assert len(set(ids)) == 2
    recorded = charges(ledger_file)
    assert [o for _, o in recorded] == [CREATED, CREATED]
    keys = [k for k, _ in recorded]
    assert all(keys) and keys[0] != keys[1]  # the SDK did send a key, just not a stable one


def test_sdk_in_process_retry_reuses_its_key(
    server: FakesServer, ledger_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Within one process the automatic key does protect a retry: the 500 after the charge
    # committed is retried with the same key and replayed. Only a restart loses it.
    monkeypatch.setattr(stripe._http_client.HTTPClient, "_sleep_time_seconds", lambda self, n: 0.0)
    Ledger(ledger_file, "t").configure("payments", indeterminate_first=1)
    intent = client(server, retries=2).v1.payment_intents.create(params=PARAMS)
    recorded = charges(ledger_file)
    assert [o for _, o in recorded] == [CREATED, REPLAYED]
    assert recorded[0][0] == recorded[1][0]
    assert intent.latest_charge == Ledger(ledger_file, "t").calls()[0].effect_id


def test_sdk_sees_stripe_errors(server: FakesServer, ledger_file: str) -> None:
    sdk = client(server)
    sdk.v1.payment_intents.create(params=PARAMS, options={"idempotency_key": "k"})
    with pytest.raises(stripe.IdempotencyError) as info:
        sdk.v1.payment_intents.create(params={**PARAMS, "amount": 1}, options={"idempotency_key": "k"})
    assert info.value.http_status == 400
    with pytest.raises(stripe.InvalidRequestError) as missing:
        sdk.v1.payment_intents.retrieve("ch_9999")
    assert missing.value.http_status == 404 and missing.value.code == "resource_missing"


def test_sdk_gets_409_for_a_key_in_flight(server: FakesServer, ledger_file: str) -> None:
    Ledger(ledger_file, "t").configure("payments", latency=1.0)
    sdk = client(server)
    opts = {"idempotency_key": "slow"}
    done: list[str] = []
    t = threading.Thread(
        target=lambda: done.append(sdk.v1.payment_intents.create(params=PARAMS, options=opts).id)
    )
    t.start()
    ledger = Ledger(ledger_file, "t")
    deadline = time.monotonic() + 5
    while not ledger.snapshot().in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(stripe.StripeError) as info:
        sdk.v1.payment_intents.create(params=PARAMS, options=opts)
    t.join(10)
    # The SDK maps a 409 to a bare APIError; the code is in the body it kept.
    assert info.value.http_status == 409
    assert info.value.json_body["error"]["code"] == "idempotency_key_in_use"
    assert done and sorted(o for _, o in charges(ledger_file)) == sorted([CONFLICT, CREATED])
