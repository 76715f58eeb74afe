"""A sequential agent that stamps ``sent_at`` on two payouts sent under stable keys.

``python restamp.py --thread T --workdir W [--bug restamp]``

Correct: the timestamp is stamped once, in its own checkpointed step, so a re-sent payout is
the same request and replays.  ``--bug restamp``: ``sent_at`` is taken inside the send step
(DEFECT): a resumed send re-stamps it under the same key, the provider refuses the changed
request, and the agent takes the refusal for "already sent".
"""

import sys
import time

from _kit import Run

from killdrill.fakes import IdempotencyError

BUG = "--bug" in sys.argv
if BUG:
    sys.argv[sys.argv.index("--bug") : sys.argv.index("--bug") + 2] = []

run = Run()
PAYOUTS = [("acct_north", 700), ("acct_south", 900)]

for account, amount in PAYOUTS:
    stamped = None if BUG else run.step(f"stamp_{account}", lambda: round(time.time(), 6))

    def send(account: str = account, amount: int = amount, stamped: float | None = stamped) -> str:
        sent_at = round(time.time(), 6) if BUG else stamped  # DEFECT if BUG: re-stamped on resume
        key = f"{run.thread}:payout:{account}"
        try:
            return run.fakes.payments.charge(
                idempotency_key=key, account=account, amount=amount, sent_at=sent_at
            )["id"]
        except IdempotencyError:
            return "already-sent"  # the provider refused the key: taken to mean it went through

    run.step(f"send_{account}", send)
