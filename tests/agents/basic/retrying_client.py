"""A client that retries its own HTTP calls: the target of ``drop:`` / ``reset:`` connection faults.

``python tests/agents/basic/retrying_client.py --thread T --client requests|stripe``
``--key stable|none|per-retry``

It charges an order once through the HTTP fakes (``$KILLDRILL_FAKES_URL``) and retries a call
whose connection failed (reset, or closed without an answer), up to 3 times:

``--client requests``  POST ``/fakes/payments/charge`` with ``requests``; the retry loop is the
                       agent's own.  ``--key stable`` sends one key derived from the order on every
                       try (the provider replays the stored charge); ``none`` sends no key and
                       ``per-retry`` a new uuid per try (a dropped answer is then charged again).
``--client stripe``    the real ``stripe`` SDK against the fake's ``/v1/payment_intents``.
                       ``--key stable``: ``max_network_retries=2``, the SDK retries itself and
                       sends the same automatic ``Idempotency-Key`` on each of its retries.
                       ``--key per-retry``: the SDK's retries off, the agent calls ``create`` again
                       on ``APIConnectionError`` (the SDK makes a new key per call).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

import killdrill

TRIES = 3


def charge_with_requests(base: str, thread: str, key_mode: str) -> dict[str, Any]:
    import requests

    stable = f"charge:{thread}:ord_7"
    for _ in range(TRIES):
        headers = {"X-Killdrill-Pid": str(os.getpid())}
        if key_mode == "stable":
            headers["Idempotency-Key"] = stable
        elif key_mode == "per-retry":
            headers["Idempotency-Key"] = f"{stable}:{uuid.uuid4().hex}"
        try:
            resp = requests.post(
                f"{base}/fakes/payments/charge",
                json={"amount": 4200, "currency": "usd", "order": "ord_7"},
                headers=headers,
                timeout=10,
            )
        except requests.ConnectionError as exc:
            print(f"connection failed ({type(exc).__name__}), retrying", file=sys.stderr)
            time.sleep(0.05)
            continue
        resp.raise_for_status()
        result: dict[str, Any] = resp.json()
        return result
    raise SystemExit(f"gave up after {TRIES} tries")


def charge_with_stripe(base: str, key_mode: str) -> dict[str, Any]:
    import stripe

    params: Any = {"amount": 4200, "currency": "usd", "metadata": {"order": "ord_7"}}
    if key_mode == "stable":
        client = stripe.StripeClient("sk_test_x", base_addresses={"api": base}, max_network_retries=2)
        return client.v1.payment_intents.create(params=params).to_dict()
    client = stripe.StripeClient("sk_test_x", base_addresses={"api": base}, max_network_retries=0)
    for _ in range(TRIES):
        try:
            return client.v1.payment_intents.create(params=params).to_dict()
        except stripe.APIConnectionError as exc:
            print(f"stripe connection error ({exc.user_message}), retrying", file=sys.stderr)
    raise SystemExit(f"gave up after {TRIES} tries")


def main() -> int:
    parser = argparse.ArgumentParser(prog="retrying_client.py")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--client", choices=("requests", "stripe"), default="requests")
    parser.add_argument("--key", choices=("stable", "none", "per-retry"), default="stable")
    args = parser.parse_args()
    base = os.environ["KILLDRILL_FAKES_URL"]
    with killdrill.node("charge"):
        if args.client == "stripe":
            if args.key == "none":
                parser.error("the stripe client always sends a key: use stable or per-retry")
            result = charge_with_stripe(base, args.key)
        else:
            result = charge_with_requests(base, args.thread, args.key)
    print(json.dumps({"charged": result.get("id") or result.get("result", {}).get("id")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
