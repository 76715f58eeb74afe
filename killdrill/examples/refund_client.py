"""The refund service's client (``killdrill.examples.refund_dbos``), the driver of its drill:
``POST /refunds`` and wait for the answer, retrying as clients do (connection refused while the
app restarts, a connection cut mid-request) with the same refund id, for up to ``--patience``
seconds.  Exit 0 with the refund's answer."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the app's base URL")
    parser.add_argument("--refund", required=True, help="the refund's id (the workflow id)")
    parser.add_argument("--payment-intent", required=True)
    parser.add_argument("--amount", type=int, required=True)
    parser.add_argument("--patience", type=float, default=45.0)
    args = parser.parse_args(argv)
    body = {"refund": args.refund, "payment_intent": args.payment_intent, "amount": args.amount}
    request = urllib.request.Request(
        args.url.rstrip("/") + "/refunds",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    deadline = time.monotonic() + args.patience
    while True:
        try:
            with urllib.request.urlopen(request, timeout=args.patience) as resp:
                print(resp.read().decode())
                return 0
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or time.monotonic() > deadline:
                print(f"refund {args.refund}: HTTP {exc.code}: {exc.read().decode()[:300]}", file=sys.stderr)
                return 1
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            if time.monotonic() > deadline:
                print(f"refund {args.refund}: gave up: {exc}", file=sys.stderr)
                return 1
        time.sleep(0.1)


if __name__ == "__main__":
    raise SystemExit(main())
