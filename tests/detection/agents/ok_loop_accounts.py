"""Correct: a loop over accounts, one checkpointed charge per account, keys from what it is.

Each key is ``idempotency_key(thread, "charge", 0, {account, cycle})`` and goes to the provider
through the effect store, so a re-run of any account replays its charge; the per-account
counter increment is keyed the same way.
"""

from _kit import Run

from killdrill.effects import durable_effect, idempotency_key

ACCOUNTS = {"acme": 1200, "globex": 800, "initech": 450}
CYCLE = "2024-07"
run = Run()


def settle(account: str, amount: int) -> str:
    ident = {"account": account, "cycle": CYCLE}
    key = idempotency_key(run.thread, "charge", 0, ident)
    pay = lambda: run.fakes.payments.charge(idempotency_key=key, amount=amount, customer=account)  # noqa: E731
    charge = durable_effect(run.store(), key, pay, provider_honours_keys=True, payload=ident)
    ckey = idempotency_key(run.thread, "count", 0, ident)
    run.fakes.counter.increment("settled", idempotency_key=ckey)
    return charge["id"]


for account, amount in ACCOUNTS.items():
    run.step(f"settle_{account}", lambda a=account, m=amount: settle(a, m))
run.step("close_cycle", lambda: run.fakes.kv.set(f"cycle:{CYCLE}", sorted(ACCOUNTS)))
