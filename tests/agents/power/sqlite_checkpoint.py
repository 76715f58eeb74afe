"""A payout agent that keeps its progress in SQLite in WAL mode, one connection for the whole run
(as a checkpointer library holds one): each payout's idempotency key is made once and committed
before the charge, so a resumed attempt sends the same key again.

Correct: ``PRAGMA synchronous=FULL``, under which every commit fsyncs the WAL.  ``--bug normal``:
``synchronous=NORMAL``, the setting many apps choose for speed: in WAL mode a commit is not
synced (only a checkpoint of the WAL is), so it survives every SIGKILL and not a power loss.
"""

import argparse
import sqlite3
import uuid

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--db", required=True)
p.add_argument("--bug", choices=("normal",), default=None)
args = p.parse_args()

db = sqlite3.connect(args.db, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute(f"PRAGMA synchronous={'NORMAL' if args.bug == 'normal' else 'FULL'}")
db.execute(
    "CREATE TABLE IF NOT EXISTS payouts (payee TEXT PRIMARY KEY, key TEXT NOT NULL, done INTEGER NOT NULL)"
)

payments = connect().payments
for payee, amount in (("alice", 1200), ("bob", 3400)):
    row = db.execute("SELECT key, done FROM payouts WHERE payee = ?", (payee,)).fetchone()
    if row is not None and row[1]:
        continue
    with killdrill.node(f"pay_{payee}"):
        if row is None:
            key = f"payout-{uuid.uuid4()}"
            db.execute("INSERT INTO payouts VALUES (?, ?, 0)", (payee, key))
        else:
            key = row[0]
        payments.charge(idempotency_key=key, amount=amount, customer=payee)
    db.execute("UPDATE payouts SET done = 1 WHERE payee = ?", (payee,))
