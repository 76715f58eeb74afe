"""Defect: the charged amount is recomputed inside the node from a live feed, not checkpointed.

The key is stable (thread, node, invoice), but on resume the FX feed has moved, so the same
key now carries another amount: the provider refuses it (``key_reused``) and the settlement
cannot finish.
"""

import sqlite3

from _kit import Run

from killdrill.effects import idempotency_key

run = Run()
invoice = run.step("load_invoice", lambda: {"invoice": "inv-5", "usd": 10000})


def fx_rate() -> float:
    """A live EUR rate: every read sees the market a tick later."""
    with sqlite3.connect(str(run.workdir / "fx.sqlite"), isolation_level=None) as db:
        db.execute("CREATE TABLE IF NOT EXISTS feed (ticks INTEGER)")
        db.execute("INSERT INTO feed VALUES (1)")
        ticks = db.execute("SELECT count(*) FROM feed").fetchone()[0]
    return 0.91 + ticks / 1000


def charge() -> str:
    amount = round(invoice["usd"] * fx_rate())  # DEFECT: recomputed on every attempt
    key = idempotency_key(run.thread, "charge", 0, {"invoice": invoice["invoice"]})
    return run.fakes.payments.charge(idempotency_key=key, amount=amount, currency="eur")["id"]


run.step("charge", charge)
