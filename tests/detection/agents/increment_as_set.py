"""Defect: an increment disguised as a set (read the balance, add, write it back).

``kv.set`` looks idempotent, but the value written depends on the value read: a re-run after
a kill between the write and ``committed:credit`` adds the amount twice.  The final state
differs from a clean run's: ``state_diverged``.
"""

from _kit import Run

run = Run()
amount = run.step("decide", lambda: 1500)


def credit() -> int:
    kv = run.fakes.kv
    balance = int(kv.get("balance:acme", 0)) + amount  # DEFECT: relative to whatever is there now
    kv.set("balance:acme", balance)
    return balance


run.step("credit", credit)
run.step("notify", lambda: run.fakes.kv.set("credited:acme", True))
