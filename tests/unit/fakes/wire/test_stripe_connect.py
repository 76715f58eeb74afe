"""Stripe's transfers, their reversals and payouts through the real ``stripe`` SDK: one test per
rule the fake keeps; the connected account comes from an existing-objects file (``--existing``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

stripe = pytest.importorskip("stripe")
httpx = pytest.importorskip("httpx")

from killdrill.errors import UsageError  # noqa: E402
from killdrill.fakes.existing import load_existing  # noqa: E402
from killdrill.fakes.http import FakesServer  # noqa: E402
from killdrill.ledger import Ledger  # noqa: E402
from tests.wire_support import THREAD, outcomes  # noqa: E402

EXISTING = '[[stripe.accounts]]\nid = "acct_seller_7"\n'
TRANSFER = {"amount": 8000, "currency": "usd", "destination": "acct_seller_7", "transfer_group": "order-7"}


@pytest.fixture
def sdk(ledger_file: str, tmp_path: Path) -> Iterator[stripe.StripeClient]:
    path = tmp_path / "existing.toml"
    path.write_text(EXISTING)
    load_existing(str(path)).plant(Ledger(ledger_file, THREAD))
    with FakesServer(ledger_file, thread=THREAD) as server:
        yield stripe.StripeClient("sk_test_x", base_addresses={"api": server.url}, max_network_retries=0)


def transfer(sdk: stripe.StripeClient, key: str, **params: Any) -> Any:
    body = {k: v for k, v in {**TRANSFER, **params}.items() if v is not None}
    return sdk.v1.transfers.create(params=body, options={"idempotency_key": key})  # type: ignore[arg-type]


def reverse(sdk: stripe.StripeClient, transfer_id: str, key: str, **params: Any) -> Any:
    return sdk.v1.transfers.reversals.create(transfer_id, params=params, options={"idempotency_key": key})  # type: ignore[arg-type]


def payout(sdk: stripe.StripeClient, key: str, **params: Any) -> Any:
    body = {"amount": 5000, "currency": "usd", **params}
    return sdk.v1.payouts.create(params=body, options={"idempotency_key": key})  # type: ignore[arg-type]


def refused(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with pytest.raises(stripe.StripeError) as info:
        fn(*args, **kwargs)
    return info.value


def test_a_transfer_is_made_once_per_key_and_another_body_under_it_is_an_idempotency_error(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    first = transfer(sdk, "t-1", metadata={"order": "o-7"})
    assert (first.object, first.amount, first.destination, first.transfer_group) == (
        "transfer",
        8000,
        "acct_seller_7",
        "order-7",
    )
    assert first.id.startswith("tr_") and first.metadata.to_dict() == {"order": "o-7"}
    assert transfer(sdk, "t-1", metadata={"order": "o-7"}).id == first.id  # the first answer
    error = refused(transfer, sdk, "t-1", amount=9000)
    assert isinstance(error, stripe.IdempotencyError), error
    assert transfer(sdk, "t-2").id != first.id  # another key: the seller is paid again
    assert outcomes(ledger_file, "payments") == ["created", "replayed", "rejected", "created"]
    assert {c.op for c in Ledger(ledger_file, THREAD).calls()} == {"transfer"}
    assert sdk.v1.transfers.retrieve(first.id).amount_reversed == 0


def test_a_transfer_needs_its_fields_and_a_destination_that_exists(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    for missing in ("amount", "currency", "destination"):
        error = refused(transfer, sdk, f"m-{missing}", **{missing: None})
        assert (error.http_status, error.code, error.param) == (400, "parameter_missing", missing)
    error = refused(transfer, sdk, "t-nobody", destination="acct_nobody")
    assert isinstance(error, stripe.InvalidRequestError) and error.http_status == 400
    assert (error.code, error.param) == ("resource_missing", "destination")
    assert "No such destination: 'acct_nobody'" in str(error.user_message)
    error = refused(sdk.v1.transfers.retrieve, "tr_nothing")
    assert (error.http_status, error.code) == (404, "resource_missing")


def test_reversals_are_partial_until_the_transfer_is_used_up(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    made = transfer(sdk, "t-1")
    first = reverse(sdk, made.id, "rv-1", amount=3000)
    assert (first.object, first.amount, first.transfer, first.currency) == (
        "transfer_reversal",
        3000,
        made.id,
        "usd",
    )
    assert reverse(sdk, made.id, "rv-1", amount=3000).id == first.id  # replayed
    error = refused(reverse, sdk, made.id, "rv-2", amount=6000)  # 5,000 left
    assert (error.http_status, error.code, error.param) == (400, "amount_too_large", "amount")
    rest = reverse(sdk, made.id, "rv-3")  # no amount: what is left
    assert rest.amount == 5000
    after = sdk.v1.transfers.retrieve(made.id)
    assert (after.amount_reversed, after.reversed) == (8000, True)
    assert [r.id for r in after.reversals.data] == [first.id, rest.id]
    assert sdk.v1.transfers.reversals.retrieve(made.id, rest.id).amount == 5000
    error = refused(reverse, sdk, made.id, "rv-4", amount=1)
    assert error.http_status == 400 and error.code == "transfer_already_reversed"
    error = refused(reverse, sdk, "tr_nothing", "rv-5")
    assert (error.http_status, error.code) == (404, "resource_missing")
    ops = [(c.op, c.outcome) for c in Ledger(ledger_file, THREAD).calls()]
    assert ops == [
        ("transfer", "created"),
        ("reverse_transfer", "created"),
        ("reverse_transfer", "replayed"),
        ("reverse_transfer", "rejected"),
        ("reverse_transfer", "created"),
        ("reverse_transfer", "rejected"),
        ("reverse_transfer", "rejected"),
    ]


def test_a_payout_is_pending_once_per_key_and_cancelled_once(
    sdk: stripe.StripeClient, ledger_file: str
) -> None:
    made = payout(sdk, "p-1", metadata={"seller": "7"})
    assert (made.object, made.status, made.method, made.automatic) == ("payout", "pending", "standard", False)
    assert made.arrival_date == made.created + 2 * 24 * 3600 and made.id.startswith("po_")
    assert payout(sdk, "p-1", metadata={"seller": "7"}).id == made.id
    assert isinstance(refused(payout, sdk, "p-1", amount=1), stripe.IdempotencyError)
    instant = payout(sdk, "p-2", method="instant")
    assert (instant.method, instant.arrival_date) == ("instant", instant.created)
    error = refused(payout, sdk, "p-3", method="overnight")
    assert (error.code, error.param) == ("parameter_invalid_enum", "method")
    assert refused(payout, sdk, "p-4", currency=None).code == "parameter_missing"
    canceled = sdk.v1.payouts.cancel(made.id)
    assert canceled.status == "canceled" and sdk.v1.payouts.retrieve(made.id).status == "canceled"
    error = refused(sdk.v1.payouts.cancel, made.id)  # only a pending payout
    assert error.http_status == 400 and error.code == "payout_not_cancelable"
    assert refused(sdk.v1.payouts.cancel, "po_nothing").http_status == 404
    assert refused(sdk.v1.payouts.retrieve, "po_nothing").code == "resource_missing"
    ops = [c.op for c in Ledger(ledger_file, THREAD).calls() if c.outcome in ("created", "replayed")]
    assert ops == ["payout", "payout", "payout", "cancel_payout"]


def _declared(cls: type) -> set[str]:
    """The fields the ``stripe`` SDK declares for ``cls`` (generated from Stripe's OpenAPI spec)."""
    return {name for klass in cls.__mro__ for name in getattr(klass, "__annotations__", {})}


def test_objects_use_stripes_names_and_send_the_fields_an_agent_reads(sdk: stripe.StripeClient) -> None:
    made = transfer(sdk, "t-shape")
    reversal = reverse(sdk, made.id, "rv-shape", amount=100)
    paid = payout(sdk, "p-shape")
    pairs = (
        (sdk.v1.transfers.retrieve(made.id), stripe.Transfer),
        (reversal, stripe.TransferReversal),
        (paid, stripe.Payout),
    )
    for obj, cls in pairs:
        body = obj.to_dict()
        assert body["object"] == cls.OBJECT_NAME
        assert set(body) <= _declared(cls), sorted(set(body) - _declared(cls))  # no name Stripe lacks
    assert made.description is None and made.source_transaction is None and made.livemode is False
    assert made.reversals.data == [] and isinstance(made.created, int)
    assert reversal.source_refund is None and reversal.metadata.to_dict() == {}
    assert (paid.failure_code, paid.destination, paid.type) == (None, None, "bank_account")


def test_a_connected_account_declared_wrongly_is_one_line_naming_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "existing.toml"
    path.write_text('[[stripe.accounts]]\nid = "seller_7"\n')
    with pytest.raises(UsageError, match=r"stripe\.accounts.*'acct_'"):
        load_existing(str(path))
