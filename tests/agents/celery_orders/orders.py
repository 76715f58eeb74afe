"""A Celery order worker as users write one (``celery -A orders worker -c 2``): a keyed Stripe
charge per order, then its receipt row in PostgreSQL (``ON CONFLICT DO NOTHING``), with
``acks_late`` and ``task_reject_on_worker_lost`` so a killed worker's order is delivered again.

``STRIPE_API_BASE`` is the Stripe endpoint (the drill's HTTP fakes), ``ORDERS_DATABASE_URL`` the
database and ``ORDERS_TABLE`` the receipts table (one per case in the tests)."""

import os

import psycopg
import stripe
from celery import Celery

app = Celery("orders")
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    result_backend=os.environ.get("CELERY_RESULT_BACKEND", "redis://127.0.0.1:6379/0"),
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)
stripe.api_key = "sk_test_orders"
stripe.api_base = os.environ.get("STRIPE_API_BASE", stripe.api_base)
TABLE = os.environ.get("ORDERS_TABLE", "receipts")


@app.task
def charge_order(order_id: str, amount: int) -> str:
    intent = stripe.PaymentIntent.create(
        amount=amount, currency="usd", metadata={"order_id": order_id},
        idempotency_key=f"order-{order_id}",
    )  # fmt: skip
    with psycopg.connect(os.environ["ORDERS_DATABASE_URL"], autocommit=True) as db:
        db.execute(
            f"INSERT INTO {TABLE} (order_id, payment_intent) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (order_id, intent.id),
        )
    return str(intent.id)
