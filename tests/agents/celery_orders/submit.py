"""The submitter: sends three orders (each under a task id of its own, once: a re-run finds its
note and waits for the tasks it sent) and waits for their results."""

import os
import sys
from pathlib import Path

import psycopg
from orders import TABLE, app, charge_order

thread, workdir = sys.argv[1], Path(sys.argv[2])
with psycopg.connect(os.environ["ORDERS_DATABASE_URL"], autocommit=True) as db:
    db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (order_id text PRIMARY KEY, payment_intent text)")
ids = [f"{thread}-order-{n}" for n in range(1, 4)]
note = workdir / "sent"
if not note.exists():
    for task_id in ids:
        charge_order.apply_async(args=(task_id, 1000), task_id=task_id)
    note.write_text("\n".join(ids))
for task_id in ids:
    print(task_id, app.AsyncResult(task_id).get(timeout=300))
