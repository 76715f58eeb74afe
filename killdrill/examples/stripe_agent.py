"""An agent that charges through the real ``stripe`` SDK, pointed at killdrill's HTTP fakes.

``python -m killdrill.examples.stripe_agent --thread T --state PATH [--auto-key]``

The SDK sends an ``Idempotency-Key`` on every POST by itself, but it generates the key once
per call and reuses it only for its own in-process retries: after a SIGKILL and a restart
the key is new and the customer is charged twice.  ``--auto-key`` relies on that (the
mistake); the default passes an explicit key derived from what the charge is (thread,
account, billing cycle, amount), so a resumed attempt sends the same key and the provider
replays the first result.

The agent's own checkpoint is a JSON file (``--state``), written atomically after the charge.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import killdrill
from killdrill.effects import idempotency_key


def load_state(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            state: dict[str, Any] = json.load(f)
            return state
    except FileNotFoundError:
        return {}


def save_state(path: str, state: dict[str, Any]) -> None:
    """Write-rename-fsync: a kill leaves the old file or the new one, never half of one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state-")
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.stripe_agent")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--state", required=True, help="the agent's checkpoint (JSON file)")
    parser.add_argument("--auto-key", action="store_true", help="rely on the SDK's automatic key")
    parser.add_argument("--account", default="acct_42")
    parser.add_argument("--cycle", default="2026-05")
    parser.add_argument("--amount", type=int, default=3815)
    args = parser.parse_args(argv)

    url = os.environ.get("KILLDRILL_FAKES_URL")
    if not url:
        print(
            "stripe_agent: KILLDRILL_FAKES_URL is not set (run it under killdrill --http-fakes)",
            file=sys.stderr,
        )
        return 2
    import stripe

    client = stripe.StripeClient("sk_test_x", base_addresses={"api": url})
    state = load_state(args.state)
    if "payment_intent" not in state:
        params: dict[str, Any] = {
            "amount": args.amount,
            "currency": "usd",
            "metadata": {"account": args.account, "cycle": args.cycle},
        }
        options: dict[str, Any] = {}
        if not args.auto_key:
            identity = {"account": args.account, "cycle": args.cycle, "amount": args.amount}
            options["idempotency_key"] = idempotency_key(args.thread, "charge_customer", 0, identity)
        with killdrill.node("charge_customer"):
            # stripe types params as a TypedDict; this example builds a plain dict
            intent = client.v1.payment_intents.create(params=params, options=options)  # type: ignore[arg-type]
        state["payment_intent"] = intent.id
        with killdrill.node("save_state"):
            save_state(args.state, state)
    print(json.dumps(state, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(run())
