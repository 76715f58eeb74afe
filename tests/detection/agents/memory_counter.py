"""Defect: keys number the charges with a counter held in memory, restarted by every attempt.

After a kill, the resumed attempt skips the accounts already committed, so its counter is
behind: the next account gets the key an earlier account used.  The provider refuses a key
reused for another payload: ``key_reused``, and the settlement can no longer finish.
"""

from _kit import Run

ACCOUNTS = {"acme": 1200, "globex": 800, "initech": 450}
run = Run()
sent = 0  # DEFECT: the sequence number lives in memory; it restarts at 0 on resume


def charge(account: str, amount: int) -> str:
    global sent
    key = f"{run.thread}-charge-{sent}"
    result = run.fakes.payments.charge(idempotency_key=key, amount=amount, customer=account)
    sent += 1
    return result["id"]


for account, amount in ACCOUNTS.items():
    run.step(f"charge_{account}", lambda a=account, m=amount: charge(a, m))
