"""Correct: a branching graph; each order is routed by a pure score, each branch's effects keyed.

Low-risk orders are charged and announced by webhook; high-risk ones open a review ticket.
Routing is pure compute (same answer on replay), and every non-idempotent effect carries a
key derived from the order, so re-running any node converges.
"""

from _kit import Run

from killdrill.effects import idempotency_key

ORDERS = [
    {"order": "o-1", "amount": 1800, "country": "DE"},
    {"order": "o-2", "amount": 99000, "country": "XX"},
]
run = Run()


def score(order: dict) -> str:
    risky = order["amount"] > 50000 or order["country"] == "XX"
    return "review" if risky else "approve"


def approve(order: dict) -> str:
    key = idempotency_key(run.thread, "approve", 0, order)
    charge = run.fakes.payments.charge(idempotency_key=key, amount=order["amount"], order=order["order"])
    hook = idempotency_key(run.thread, "approve.webhook", 0, order)
    run.fakes.webhooks.post(idempotency_key=hook, event="order.paid", order=order["order"])
    return charge["id"]


def review(order: dict) -> str:
    key = idempotency_key(run.thread, "review", 0, order)
    return run.fakes.tickets.create(idempotency_key=key, queue="fraud", order=order["order"])["id"]


for order in ORDERS:
    route = run.step(f"score_{order['order']}", lambda o=order: score(o))
    branch = approve if route == "approve" else review
    run.step(f"{route}_{order['order']}", lambda o=order, b=branch: b(o))
    run.fakes.kv.set(f"status:{order['order']}", route)  # an idempotent write: converges on replay
