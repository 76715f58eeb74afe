"""An order agent that charges the order and records the charge in its PostgreSQL database
(``DATABASE_URL``), as users write one: the step is retried when the connection fails, and each
try first looks for the order's row, so a charge already recorded is not made again.  The charge
is made before the row commits: a database that dies in between loses the row, and the retry
charges again, under the order's key (replayed), or, with ``--bug nokey``, without one (twice)."""

import argparse
import os
import sys
import time

import psycopg

import killdrill
from killdrill.fakes import connect

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--bug", default="")
args = p.parse_args()
url = os.environ["DATABASE_URL"]
fakes = connect()


def with_retry(step: str, fn):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                return fn(conn)
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"{step}: gave up: {exc}") from None
            print(f"{step}: connection failed ({str(exc).strip()}); retrying", file=sys.stderr, flush=True)
            time.sleep(0.1)


def setup(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS charges (order_id text PRIMARY KEY, charge text NOT NULL)")
    conn.commit()


def charge_order(conn: psycopg.Connection) -> str:
    found = conn.execute("SELECT charge FROM charges WHERE order_id = %s", (args.order,)).fetchone()
    if found:
        return str(found[0])
    with killdrill.node("charge"):
        key = None if args.bug == "nokey" else f"order:{args.order}"
        charge = fakes.payments.charge(idempotency_key=key, amount=4200, customer=args.order)
    conn.execute("INSERT INTO charges (order_id, charge) VALUES (%s, %s)", (args.order, charge["id"]))
    conn.commit()
    return str(charge["id"])


with_retry("setup", setup)
print(f"order {args.order} charged: {with_retry('charge', charge_order)}")
