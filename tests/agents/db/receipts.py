"""An order agent that charges the order (a keyed charge) and then writes its receipt row into its
own database, as users write one with SQLAlchemy: ``DATABASE_URL`` names the database.

Correct: ``order_id`` is unique and the row is written with ``INSERT ... ON CONFLICT DO NOTHING``,
so a re-run after a kill finds the first row.  ``--bug plain``: a plain ``INSERT`` into a table
without the unique constraint, so a re-run after the row landed writes a second one.
``--bug row-first``: the receipt is written before the charge, and a re-run that finds it takes
the order as done: killed between the two, the order has its receipt and no charge.
"""

import argparse
import os

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--bug", choices=("plain", "row-first"), default=None)
args = p.parse_args()

meta = sa.MetaData()
receipts = sa.Table(
    "receipts",
    meta,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("order_id", sa.String(80), unique=args.bug is None, nullable=False),
    sa.Column("amount", sa.Integer, nullable=False),
    sa.Column("charge_id", sa.String(80), nullable=False),
    sa.Column("created_at", sa.DateTime, server_default=sa.func.now()),
)
engine = sa.create_engine(os.environ["DATABASE_URL"])
meta.create_all(engine)

if args.bug == "row-first":
    with engine.begin() as conn:
        done = conn.execute(sa.select(receipts.c.id).where(receipts.c.order_id == args.order)).first()
    if done is None:
        with killdrill.node("receipt"), engine.begin() as conn:
            conn.execute(receipts.insert().values(order_id=args.order, amount=4200, charge_id="pending"))
        with killdrill.node("charge"):
            connect().payments.charge(idempotency_key=f"order-{args.order}", amount=4200, customer=args.order)
    raise SystemExit(0)
with killdrill.node("charge"):
    key = f"order-{args.order}"
    charge = connect().payments.charge(idempotency_key=key, amount=4200, customer=args.order)
with killdrill.node("receipt"), engine.begin() as conn:
    row = {"order_id": args.order, "amount": 4200, "charge_id": charge["id"]}
    if args.bug == "plain":
        conn.execute(receipts.insert().values(**row))
    else:
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        conn.execute(dialect.insert(receipts).values(**row).on_conflict_do_nothing(index_elements=["order_id"]))
engine.dispose()
