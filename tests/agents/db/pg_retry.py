"""An agent that books an order's payout in its PostgreSQL database with psycopg, as users write
one: a transaction per step, retried when the connection fails.  ``DATABASE_URL`` names the
database (a drill points it at its ``--proxy``); it imports nothing of killdrill.

``--retry blind`` (the bug): a connection error means "try the step again", so when the answer to
its ``COMMIT`` is lost after the server committed, the payout is booked twice.
``--retry check`` (correct): each try first looks for the order's row (a commit whose answer was
lost is found, not repeated); so does a re-run after a kill.
"""

import argparse
import os
import sys
import time

import psycopg

p = argparse.ArgumentParser()
p.add_argument("--order", required=True)
p.add_argument("--retry", choices=("blind", "check"), required=True)
args = p.parse_args()
url = os.environ["DATABASE_URL"]

with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS payouts (order_id text NOT NULL, amount integer NOT NULL)")


def book_payout(order_id: str, amount: int) -> None:
    for attempt in range(1, 6):
        try:
            with psycopg.connect(url, connect_timeout=10) as conn:
                if args.retry == "check":
                    found = conn.execute("SELECT 1 FROM payouts WHERE order_id = %s", (order_id,)).fetchone()
                    if found:
                        return
                conn.execute("INSERT INTO payouts (order_id, amount) VALUES (%s, %s)", (order_id, amount))
                conn.commit()
            return
        except psycopg.OperationalError as exc:
            print(f"payout {order_id}: connection failed ({exc}); try {attempt + 1}", file=sys.stderr)
            time.sleep(0.05 * attempt)
    raise SystemExit(f"payout {order_id}: gave up")


book_payout(args.order, 4200)
print(f"payout {args.order} booked")
