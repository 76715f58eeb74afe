"""Defect: the key hashes an unpinned model output (a summary worded differently on each call).

The charge is keyed by ``sha256(account + summary)``; the summary is generated inside the
node by a "model" whose wording varies (temperature > 0), so a re-run gets another key:
``key_changed`` and ``duplicate_effect``.
"""

import hashlib
import random

from _kit import Run

run = Run()
usage = run.step("read_usage", lambda: {"account": "acme", "units": 312})


def model_summary(units: int) -> str:
    """Stands in for an LLM call at temperature > 0: same meaning, other words on every call.

    The confidence has six digits: with two, a resumed call repeated the first call's wording once
    in ~400 (a CI run saw it), the key was the same, the charge landed once and the verdict was
    right to pass it.  Now a repeat is ~1 in 10^7.
    """
    opener = random.choice(
        ["Usage was", "This month the customer used", "Metered usage:", "Customer consumed"]
    )
    tail = random.choice(["", ".", " in total.", " this period.", ", within plan."])
    return f"{opener} {units} units{tail} (confidence {random.uniform(0.8, 1.0):.6f})"


def charge() -> str:
    summary = model_summary(usage["units"])
    key = hashlib.sha256(f"acme|{summary}".encode()).hexdigest()  # DEFECT: model wording in the key
    amount = usage["units"] * 10
    return run.fakes.payments.charge(idempotency_key=key, amount=amount, customer="acme")["id"]


run.step("charge", charge)
