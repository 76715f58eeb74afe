"""A refund that waits for a human: a LangGraph ``interrupt()`` resumed by whoever delivers the answer.

``python tests/agents/basic/approval.py --thread T (--db PATH | --postgres URL) [--approval VALUE] [--claim]``

``review -> refund``: ``refund`` calls ``interrupt()`` for a human approval, then refunds the
customer (``payments.charge`` with a stable key) and emails them (``mailbox.send``: no key can
dedupe an email).  One process does what a web app splits in two: it starts the run, which parks
at the interrupt (``graph.invoke`` returns with ``__interrupt__``), then delivers the approval
(``graph.invoke(Command(resume=VALUE))``) as the approval webhook would.

How a process knows it is a *resumer*: from the thread's own checkpoint, as a webhook handler
does.  A thread with no state is started; a thread parked at an interrupt
(``get_state(config).interrupts``) gets the approval delivered, ``--approval`` (the same value
for every process); a finished thread is left alone.  ``before:deliver_approval`` marks where a
delivery starts: a drill kills the first attempt there (parked, nothing delivered) and lines the
``--resumers`` up inside ``refund`` (``--barrier before:refund``, each has read the parked state),
or there to race the claim (``--barrier before:deliver_approval``).

Default form (as users write it): every process that finds the interrupt resumes it, so N
webhook deliveries of one approval run the node N times and email the customer N times (the
keyed refund replays; the email cannot).  ``--claim``: a delivery first claims the interrupt
with one conditional UPDATE (``UPDATE approvals SET consumed_by=? WHERE thread=? AND
interrupt_id=? AND consumed_by IS NULL``); only the process whose UPDATE changed one row
resumes the graph, the others report the approval as already consumed and exit 0.  The claim
table lives next to the checkpointer: ``PATH.approvals`` (SQLite) or the same PostgreSQL database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from typing import Any, TypedDict

import killdrill
from killdrill.fakes import Fakes, connect


class Refund(TypedDict, total=False):
    order: str
    email: str
    amount: int
    decision: str
    refund_id: str
    email_id: str


def build_graph(fakes: Fakes, thread: str) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def review(state: Refund) -> Refund:
        return {"amount": 1999 if state["order"].endswith("7") else 4999}

    def refund(state: Refund) -> Refund:
        question = {"question": "refund this order?", "order": state["order"], "amount": state["amount"]}
        decision = interrupt(question)
        if decision != "approved":
            return {"decision": str(decision)}
        charge = fakes.payments.charge(
            idempotency_key=f"refund:{thread}:{state['order']}", amount=-state["amount"], order=state["order"]
        )
        mail = fakes.mailbox.send(
            to=state["email"],
            subject=f"Your refund for {state['order']} is on its way",
            body=f"We refunded {state['amount'] / 100:.2f}.",
            ref=f"refund:{thread}",
        )
        return {"decision": "approved", "refund_id": charge["id"], "email_id": mail["id"]}

    graph = StateGraph(Refund)
    graph.add_node("review", review)
    graph.add_node("refund", refund)
    graph.add_edge(START, "review")
    graph.add_edge("review", "refund")
    graph.add_edge("refund", END)
    return graph


def _libpq(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}" if sep else url


class Approvals:
    """The consume-once claim: one row per interrupt, taken by a single conditional UPDATE."""

    def __init__(self, db: str | None, postgres: str | None) -> None:
        self.postgres = postgres
        if postgres:
            import psycopg

            self.conn: Any = psycopg.connect(_libpq(postgres), autocommit=True)
            with contextlib.suppress(psycopg.errors.UniqueViolation):  # racing creators
                self.conn.execute(
                    "CREATE TABLE IF NOT EXISTS approvals (thread TEXT, interrupt_id TEXT, consumed_by TEXT,"
                    " PRIMARY KEY (thread, interrupt_id))"
                )
        else:
            self.conn = sqlite3.connect(f"{db}.approvals", timeout=30, isolation_level=None)
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS approvals (thread TEXT, interrupt_id TEXT, consumed_by TEXT,"
                " PRIMARY KEY (thread, interrupt_id))"
            )

    def claim(self, thread: str, interrupt_id: str, me: str) -> bool:
        """True for exactly one caller per interrupt, however many deliver it at once."""
        mark = "%s" if self.postgres else "?"
        self.conn.execute(
            f"INSERT INTO approvals (thread, interrupt_id) VALUES ({mark}, {mark}) ON CONFLICT DO NOTHING",
            (thread, interrupt_id),
        )
        cur = self.conn.execute(
            f"UPDATE approvals SET consumed_by = {mark}"
            f" WHERE thread = {mark} AND interrupt_id = {mark} AND consumed_by IS NULL",
            (me, thread, interrupt_id),
        )
        return bool(cur.rowcount == 1)

    def close(self) -> None:
        self.conn.close()


@contextlib.contextmanager
def checkpointer(db: str | None, postgres: str | None) -> Iterator[Any]:
    if postgres:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(_libpq(postgres)) as saver:
            conn: Any = saver.conn  # one connection (from_conn_string), not a pool
            conn.execute("SELECT pg_advisory_lock(7262014)")  # resumers set up at once
            try:
                saver.setup()
            finally:
                conn.execute("SELECT pg_advisory_unlock(7262014)")
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(db or "") as saver:
        yield saver


def main() -> int:
    parser = argparse.ArgumentParser(prog="approval.py")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--db", help="SQLite checkpoint file (SqliteSaver)")
    parser.add_argument("--postgres", help="PostgreSQL URL (PostgresSaver)")
    parser.add_argument("--approval", default="approved", help="the resume value every delivery sends")
    parser.add_argument("--claim", action="store_true", help="claim the interrupt before resuming it")
    parser.add_argument("--order", default="ord_7")
    args = parser.parse_args()
    if not (args.db or args.postgres):
        parser.error("give --db PATH or --postgres URL")

    from langgraph.types import Command

    fakes = connect()
    config: Any = {"configurable": {"thread_id": args.thread}}
    with checkpointer(args.db, args.postgres) as saver:
        app = build_graph(fakes, args.thread).compile(checkpointer=saver)
        snapshot = app.get_state(config)
        if not snapshot.values and not snapshot.next:
            app.invoke({"order": args.order, "email": "customer@example.com"}, config)  # parks
            snapshot = app.get_state(config)
        if snapshot.interrupts:
            killdrill.boundary("before:deliver_approval")
            pending = snapshot.interrupts[0]
            if args.claim:
                approvals = Approvals(args.db, args.postgres)
                try:
                    won = approvals.claim(args.thread, pending.id, f"pid-{os.getpid()}")
                finally:
                    approvals.close()
                if not won:
                    print(f"approval {pending.id} already consumed by another delivery", file=sys.stderr)
                    return 0
            app.invoke(Command(resume=args.approval), config)
        print(json.dumps(app.get_state(config).values, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
